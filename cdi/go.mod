module github.com/dranode/dranode/cdi

go 1.26.0
