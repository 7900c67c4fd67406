module github.com/dranode/dranode/compat/cdiref

go 1.26.0

require (
	github.com/dranode/dranode/cdi v0.2.0
	github.com/opencontainers/runtime-spec v1.3.0
	tags.cncf.io/container-device-interface v1.1.1
	tags.cncf.io/container-device-interface/specs-go v1.1.1
)

require (
	github.com/dranode/dranode/checkpoint v0.2.0 // indirect
	github.com/fsnotify/fsnotify v1.7.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.19.0 // indirect
)

replace github.com/dranode/dranode/cdi => ../../cdi

replace github.com/dranode/dranode/checkpoint => ../../checkpoint
