module github.com/dranode/dranode/compat/powerloss

go 1.26.0

require (
	github.com/dranode/dranode/cdi v0.2.0
	github.com/dranode/dranode/checkpoint v0.2.0
	github.com/dranode/dranode/claimcache v0.2.0
	github.com/hanwen/go-fuse/v2 v2.12.1
)

require golang.org/x/sys v0.48.0 // indirect

replace (
	github.com/dranode/dranode/cdi => ../../cdi
	github.com/dranode/dranode/checkpoint => ../../checkpoint
	github.com/dranode/dranode/claimcache => ../../claimcache
)
