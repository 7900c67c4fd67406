module github.com/dranode/dranode/tools/envtest

go 1.26.0
