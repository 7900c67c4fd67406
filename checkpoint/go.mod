module github.com/dranode/dranode/checkpoint

go 1.26.0
