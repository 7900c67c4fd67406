module github.com/dranode/dranode/examples

go 1.26.0
