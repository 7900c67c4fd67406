module github.com/dranode/dranode/sliceclient

go 1.26.0
