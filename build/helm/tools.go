//go:build tools

// Package helm pins the helm command that scripts/build-helm.sh builds for
// the chart's tests. The build tag keeps this file out of every build; it
// exists so that "go mod tidy" keeps the command's requirements.
package helm

import _ "helm.sh/helm/v3/cmd/helm"
