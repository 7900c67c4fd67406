// Package images builds dranode's container images from the repository's Go
// binaries, without Docker or any daemon: reproducible single-platform OCI
// images (an empty base, one layer per set of binaries, every timestamp the
// same fixed time) written as OCI image layouts, the directory format of the
// OCI image-spec.
//
// The images, by name ([Names]):
//
//	dranode-agent  /usr/local/bin/dranode-agent (entrypoint), /usr/local/bin/dranodectl,
//	               the example GPU and loop driver plugins at /opt/dranode/plugins/gpu-plugin
//	               and loop-plugin, /tmp
//	pause          /pause (entrypoint): holds a pod sandbox, reaps zombies as PID 1
//	workload       /usr/local/bin/workload (entrypoint): prints its environment,
//	               device nodes and mounts (package workload), then waits
//
// Each is named [Registry]/dranode/<name>:<tag> in its layout's index.json
// (annotations io.containerd.image.name and org.opencontainers.image.ref.name),
// so "ctr images import" of its [Archive] names it without --base-name, and
// the name is already in the normalised form the CRI and the kubelet use.
//
// [Build] builds them, [Archive] writes a layout as a tar that "ctr images
// import" accepts, [Push] copies one to a registry, [PluginDigests] reads
// the SHA-256 of each driver plugin inside an image, the value the Helm
// chart's drivers[].sha256 needs.
//
// Reproducible means: the same sources, Go toolchain and [Options] give the
// same bytes, blob for blob, index.json included. Binaries are built with
// CGO_ENABLED=0, -trimpath, -buildvcs=false and an empty build ID, with
// GOFLAGS cleared; tar entries are owned by 0:0 and dated
// [Options].SourceDateEpoch (the Unix epoch unless set).
package images
