module github.com/dranode/dranode/integration

go 1.26.0

replace (
	github.com/dranode/dranode/agent => ../agent
	github.com/dranode/dranode/cdi => ../cdi
	github.com/dranode/dranode/checkpoint => ../checkpoint
	github.com/dranode/dranode/claimcache => ../claimcache
	github.com/dranode/dranode/examples/piecemeal-driver => ../examples/piecemeal-driver
	github.com/dranode/dranode/inventory => ../inventory
	github.com/dranode/dranode/pluginmgr => ../pluginmgr
	github.com/dranode/dranode/sliceclient => ../sliceclient
	github.com/dranode/dranode/tools/envtest => ../tools/envtest
)
