module github.com/dranode/dranode/tools

go 1.26.0
