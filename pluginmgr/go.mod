module github.com/dranode/dranode/pluginmgr

go 1.26.0
