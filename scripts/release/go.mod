module github.com/dranode/dranode/scripts/release

go 1.26.0

require (
	github.com/google/licensecheck v0.3.1
	go.yaml.in/yaml/v3 v3.0.5
	golang.org/x/mod v0.41.0
)

require (
	golang.org/x/exp v0.0.0-20260410095643-746e56fc9e2f // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/tools v0.49.0 // indirect
)

tool golang.org/x/exp/cmd/gorelease
