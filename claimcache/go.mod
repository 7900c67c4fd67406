module github.com/dranode/dranode/claimcache

go 1.26.0
