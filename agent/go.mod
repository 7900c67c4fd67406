module github.com/dranode/dranode/agent

go 1.26.0
