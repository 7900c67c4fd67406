module github.com/dranode/dranode/scripts/image

go 1.26.0

require (
	github.com/dranode/dranode/tools/envtest v0.0.0-00010101000000-000000000000
	github.com/google/go-containerregistry v0.22.1
	github.com/google/licensecheck v0.3.1
	go.yaml.in/yaml/v3 v3.0.5
	golang.org/x/mod v0.41.0
)

require (
	github.com/docker/cli v29.7.2+incompatible // indirect
	github.com/docker/docker-credential-helpers v0.9.3 // indirect
	github.com/klauspost/compress v1.20.1 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	github.com/pmezard/go-difflib v1.0.1-0.20181226105442-5d4384ee4fb2 // indirect
	github.com/sirupsen/logrus v1.9.4 // indirect
	github.com/stretchr/testify v1.11.1 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	gotest.tools/v3 v3.5.2 // indirect
)

replace github.com/dranode/dranode/tools/envtest => ../../tools/envtest
