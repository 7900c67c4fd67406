module github.com/dranode/dranode/claimcache

go 1.26.0

require github.com/dranode/dranode/checkpoint v0.2.0

replace github.com/dranode/dranode/checkpoint => ../checkpoint
