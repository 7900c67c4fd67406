module github.com/dranode/dranode/scripts/repocheck

go 1.26.0
