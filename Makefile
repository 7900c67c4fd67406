# One entry point over every Go module in the repository.
#
#   make test            go vet + go test -race in every module (GOWORK=off)
#   make check           everything CI runs: the lint checks below, then test
#   make test/cdi        one module (any target/<module> rule works the same)
#   make release-prepare SET=dranode, make release-tag SET=dranode (README)
#
# Workspace modules are the ones go.work uses. Compat modules (compat/*) are
# test and benchmark harnesses that import k8s.io/kubernetes or reference
# libraries; they stay outside go.work so that their dependency versions never
# leak into the workspace, and are always built with GOWORK=off.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
GO ?= go

MODULES := $(shell sed -n 's|^[[:space:]]*\./\([^[:space:]]*\)[[:space:]]*$$|\1|p' go.work)
COMPAT_MODULES := $(patsubst %/go.mod,%,$(wildcard compat/*/go.mod))
# The release tool (scripts/release), the image builder (scripts/image) and
# the repository's own checks (scripts/repocheck) are modules outside
# go.work, like the compat modules: their dependencies (gorelease,
# go-containerregistry) never reach the workspace.
TOOL_MODULES := scripts/release scripts/image scripts/repocheck
ALL_MODULES := $(MODULES) $(COMPAT_MODULES) $(TOOL_MODULES)

# Flags for go test; CI keeps the defaults, developers may add -run or -v.
TESTFLAGS ?=
# Some tests build what they check (helm, the kubelet-side harnesses) on a
# cold cache; go test's default 10-minute limit is too tight for that on 2 cores.
TEST_TIMEOUT ?= 30m
# The tests, vet and the workspace build run with -trimpath, given in
# GOFLAGS so that the binaries the tests build (go build in a test) get it
# too: the build cache then keys this repository's packages by their
# content, not by the clone's directory, and a fresh clone compiles only
# what changed (one fresh clone of a warm machine compiled 172 CPU-s of its
# own packages without it). The images are built the same way. -count=1:
# with -trimpath a fresh clone's test binaries match the last run's, and go
# test would report its results from the cache; some tests build and run
# what their process never opens (images, the release), so all run.
# -ldflags=-w: no DWARF in the binaries tests build with go build (the
# agent, the plugins, the drivers; no test reads it, tracebacks use the
# symbol table): building dranode-agent from a warm cache took 3.7-3.8
# CPU-s instead of 5.3-6.2. go test links its own test binaries with -s -w
# already. A go build that gives its own -ldflags (the images, the release)
# replaces it.
CHECK_GOFLAGS := $(strip $(shell $(GO) env GOFLAGS) -trimpath -ldflags=-w)

.PHONY: all test check lint vet workspace tidy-check versions-check versions fmt-check binaries-check docs-check generate generate-check list-modules controlplane node matrix \
	release-check release-prepare release-tag release-proxy release-consumers release-apicheck
all: check

list-modules:
	@echo $(ALL_MODULES)

test: $(addprefix test/,$(ALL_MODULES))

# Tests that need a real control plane (tools/envtest) find etcd,
# kube-apiserver, kube-scheduler and kube-controller-manager in a cache
# outside the repository; the script builds them once (times in
# build/controlplane/README.md) and returns at once when the cache is
# complete. DRANODE_CONTROLPLANE_BIN points at prebuilt binaries instead.
controlplane:
	@scripts/build-controlplane.sh >/dev/null

# The real node's binaries (kubelet, containerd, its runc shim and ctr built
# from source, runc and the CNI plugins from Debian packages), cached the same
# way by scripts/build-node.sh; DRANODE_NODE_BIN points at prebuilt ones.
# Only the modules that run a real node wait for it. The script builds
# containerd first and the kubelet last, after a control-plane build in
# progress (it waits for that build's lock), so that on an empty cache
# containerd is built beside the control plane and the kubelet compiles only
# what kube-apiserver and kube-controller-manager did not.
node:
	@scripts/build-node.sh >/dev/null

# The version matrix (scripts/matrix.sh, COMPATIBILITY.md): compat/node's
# real-node scenarios against each supported Kubernetes minor's control plane
# and kubelet, built from the module proxy, and the newest API server with
# the oldest kubelet. Not part of check or test: a minor's cold build alone
# costs about what the default control plane and node cost together.
# K8S=1.34 (or K8S=1.37/1.34, or a space-separated list) runs those columns.
matrix:
	@scripts/matrix.sh $(K8S)

# go vet compiles every dependency for its type information; with -race it
# compiles them as the race tests do, so that the two share the build cache:
# on empty caches one compile of a module's dependency graph instead of two
# (inventory alone: 221 CPU-s instead of 374). No file of the repository is
# built only without the race detector (agent's tests read -race from their
# build settings), so vetting with it misses none. vet needs no control
# plane: on an empty cache it compiles while the control plane is built,
# and only the tests wait for it (and compat/node's for the node).
# go test -vet=off: the go vet just before runs every analyzer on the same
# packages, test files included, a superset of the ten go test runs. go
# test's own pass is keyed by its analyzer list, so it ran vet again on
# every dependency for facts: in agent/ on an empty cache, go test after
# go vet took 77 CPU-s with its vet and 11 without.
test/%:
	@echo "==> test $*"
	cd $* && GOWORK=off GOFLAGS="$(CHECK_GOFLAGS)" $(GO) vet -race ./...
	@$(MAKE) --no-print-directory controlplane $(if $(filter compat/node,$*),node)
	cd $* && GOWORK=off GOFLAGS="$(CHECK_GOFLAGS)" $(GO) test -race -vet=off -count=1 -timeout $(TEST_TIMEOUT) $(TESTFLAGS) ./...

vet: $(addprefix vet/,$(ALL_MODULES))

vet/%:
	cd $* && GOWORK=off $(GO) vet ./...

# check runs generate-check alone first (it rewrites generated files that
# the other steps compile), then the control-plane build, the other lint
# checks and every module's tests CHECK_JOBS at a time
# (scripts/check-steps.sh says why), and prints how long each step took at
# the end (slowest first, also on failure) so that the next slow step is
# seen. On a cold cache the node's build (containerd first), the lint
# checks (tidy-check downloads every module's requirements) and the test
# steps' vet (which compiles their dependencies) run beside the
# control-plane build instead of after it; a step's tests wait for that
# build (the build's own lock). The order below starts the longest first.
# compat/node runs a real node and holds the host-wide test lock
# (tools/envtest/hostlock) for minutes; the other modules that take that
# lock (scripts/image's containerd, the examples' loop devices,
# integration's standalone agent) come after enough others to run once it
# is free instead of waiting for it (scripts/image started fourth, beside
# compat/node, made both slower: 1,011 s and 1,810 CPU-s for the check
# against 959 s and 1,706 CPU-s). CHECK_JOBS=1 runs one step at a time.
CHECK_JOBS ?= 3
CHECK_SERIAL = generate-check
CHECK_FIRST := compat/node compat/e2e scripts/release tools/envtest compat/powerloss checkpoint \
	scripts/image integration agent compat/fleet
CHECK_PARALLEL = controlplane node $(filter-out workspace generate-check,$(LINT_STEPS)) \
	$(addprefix test/,$(CHECK_FIRST)) workspace \
	$(addprefix test/,$(filter-out $(CHECK_FIRST),$(ALL_MODULES)))
CHECK_TIMES := $(CURDIR)/.run/check-times

check:
	@MAKE="$(MAKE)" CHECK_JOBS="$(CHECK_JOBS)" CHECK_TIMES="$(CHECK_TIMES)" CHECK_LOGS="$(CURDIR)/.run/check-logs" \
		scripts/check-steps.sh $(CHECK_SERIAL) -- $(CHECK_PARALLEL)

LINT_STEPS := fmt-check binaries-check docs-check release-check release-apicheck tidy-check versions-check workspace generate-check
lint: $(LINT_STEPS)

fmt-check:
	@echo "==> gofmt"
	@out="$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# A `go build` in a module's directory leaves its binary there, and `git add
# -A` commits it (a 30 MB plugin and a 5 MB release tool did): no tracked file
# may be an executable (ELF) or larger than 2 MB.
binaries-check:
	@echo "==> no binaries or large files tracked"
	@bad=$$( { git diff --cached --numstat $(EMPTY_TREE) | awk -F'\t' '$$1 == "-" { print $$3 }' | \
		while read -r f; do [ "$$(git cat-file blob ":$$f" | head -c 4 | od -An -tx1 | tr -d ' \n')" != 7f454c46 ] || echo "$$f (executable)"; done; \
		git ls-files -s | awk '{ print $$2, $$4 }' | git cat-file --batch-check='%(objectsize) %(rest)' | \
		awk '$$1 > 2097152 { print $$2 " (" $$1 " bytes)" }'; } ); \
	if [ -n "$$bad" ]; then echo "tracked binaries or files over 2 MB (remove them, or .gitignore the build output):"; echo "$$bad"; exit 1; fi
EMPTY_TREE := 4b825dc642cb6eb9a060e54bf8d69288fbee4904

# README.md's and DESIGN.md's module tables list every module, their links
# point to something, and the code they name exists (scripts/repocheck; go
# doc there says what is checked). It parses the repository's Go files and
# builds nothing but itself.
docs-check:
	@echo "==> README.md and DESIGN.md: every module listed, every link and code name current"
	cd scripts/repocheck && GOWORK=off $(GO) run . -C $(CURDIR) docs

# The release tool (scripts/release; go doc there lists its rules). Its own
# tests, run by test/scripts/release, prove each rule on scratch copies and
# run the whole release (prepare, tag, proxy, consumers, apicheck) on a
# scratch clone of HEAD.
RELEASE := cd scripts/release && GOWORK=off $(GO) run . -C $(CURDIR)
# Where release-proxy writes the module proxy that release-consumers reads.
PROXY_DIR ?= $(CURDIR)/.run/proxy
# Unreleased modules that must build against the released modules alone.
APPS ?= examples/piecemeal-driver

# Between releases this fails whenever a released sibling is required at a
# version other than versions.yaml's (the pseudo-version included): run
# release-prepare for the set and commit.
release-check:
	@echo "==> release rules: go.work, versions.yaml, sibling and third-party requirements"
	$(RELEASE) check

release-apicheck:
	@echo "==> API compatibility against the last release tags"
	$(RELEASE) apicheck

release-prepare:
	$(RELEASE) prepare "$(SET)"

release-tag:
	$(RELEASE) tag "$(SET)"

release-proxy:
	rm -rf "$(PROXY_DIR)"
	$(RELEASE) proxy "$(PROXY_DIR)"

release-consumers: release-proxy
	$(RELEASE) consumers $(addprefix -app ,$(APPS)) "$(PROXY_DIR)"

# The control-plane build modules are outside go.work and hold no code to
# test, but their go.mod files must stay tidy. Not build/matrix/*: tidying
# one loads a whole other Kubernetes release (build/matrix/README.md).
BUILD_MODULES := build/controlplane build/helm build/node build/node/kubelet

tidy-check: $(addprefix tidy-check/,$(ALL_MODULES) $(BUILD_MODULES))

tidy-check/%:
	@echo "==> go mod tidy -diff $*"
	cd $* && GOWORK=off $(GO) mod tidy -diff

# Every module builds a dependency at the version the others do, so that the
# build cache holds one compile of it (scripts/versions.sh says why and which
# modules are left out); make versions raises the stragglers.
versions-check:
	@echo "==> one version of each dependency"
	@scripts/versions.sh check

versions:
	scripts/versions.sh align

# The workspace must build and vet as one, not only module by module. With
# -race, like the modules' steps: the versions agree (versions-check), so
# what the modules' steps compiled is what this one needs.
workspace:
	@echo "==> build and vet through go.work"
	GOFLAGS="$(CHECK_GOFLAGS)" $(GO) build -race $(addsuffix /...,$(addprefix ./,$(MODULES)))
	GOFLAGS="$(CHECK_GOFLAGS)" $(GO) vet -race $(addsuffix /...,$(addprefix ./,$(MODULES)))

# Modules with generated code provide a "generate" target in their own
# Makefile (see pluginmgr); generate-check fails when the committed output is
# stale.
GENERATED_MODULES := $(patsubst %/Makefile,%,$(wildcard */Makefile))

generate: $(addprefix generate/,$(GENERATED_MODULES))

generate/%:
	$(MAKE) -C $* generate

generate-check: generate
	@if [ -n "$(GENERATED_MODULES)" ] && [ -n "$$(git status --porcelain -- $(GENERATED_MODULES))" ]; then \
		echo "generated code is stale; run make generate and commit:"; git status --short -- $(GENERATED_MODULES); exit 1; fi

# The quick start: the reference agent standalone (no cluster: claims from
# examples/config/claims, slices to .run/slices) with the simulated GPU
# driver and the loop block device driver; binaries in ./bin, every piece
# of state under ./.run. Ctrl-C stops it; the state stays for the next run
# (bin/loop-plugin detach .run/loop, then rm -rf .run, to start afresh).
RUN_DIR := $(CURDIR)/.run
BIN_DIR := $(CURDIR)/bin

# Reproducible OCI image layouts of the agent (with the example GPU plugin),
# pause and workload under bin/images/<name>/, without Docker
# (scripts/image/README.md): each an image index for linux/amd64 and
# linux/arm64 with OCI annotations and an SPDX SBOM per platform.
# IMAGE_FLAGS adds build flags (-tag, -arch for one platform only);
# SOURCE_DATE_EPOCH dates the images (default the Unix epoch).
IMAGE_FLAGS ?=

.PHONY: image
image:
	cd scripts/image && GOWORK=off $(GO) run . -C $(CURDIR) build -out $(BIN_DIR)/images $(IMAGE_FLAGS)

# dranodectl from this clone (tools is never released: "go install ...@latest"
# cannot resolve its replace directives; tools/README.md).
.PHONY: dranodectl
dranodectl:
	@mkdir -p $(BIN_DIR)
	cd tools && GOWORK=off $(GO) build -o $(BIN_DIR)/dranodectl ./cmd/dranodectl

# go build -v names every package it compiles (nothing when cached): a dot
# per package shows a long first build moving; anything else (errors) is
# printed as it comes.
PROGRESS := awk '/^[^ \t:\#]+$$/ { n++; printf "."; fflush(); next } { print; fflush() } END { if (n) printf " %d packages\n", n }'

.PHONY: run
run:
	@mkdir -p $(BIN_DIR) $(RUN_DIR)
	@if [ ! -x $(BIN_DIR)/dranode-agent ]; then \
		echo "==> first build of dranode-agent, gpu-plugin, loop-plugin and dranodectl into $(BIN_DIR):"; \
		echo "    about 5 minutes on 2 cores (Kubernetes client libraries, gRPC); later runs take seconds"; fi
	@echo "==> go build dranode-agent (1/4)"
	@cd agent && GOWORK=off $(GO) build -v -o $(BIN_DIR)/dranode-agent ./cmd/dranode-agent 2>&1 | $(PROGRESS)
	@echo "==> go build gpu-plugin (2/4)"
	@cd examples && GOWORK=off $(GO) build -v -o $(BIN_DIR)/gpu-plugin ./gpu 2>&1 | $(PROGRESS)
	@echo "==> go build loop-plugin (3/4)"
	@cd examples && GOWORK=off $(GO) build -v -o $(BIN_DIR)/loop-plugin ./loop/cmd/loop-plugin 2>&1 | $(PROGRESS)
	@echo "==> go build dranodectl (4/4)"
	@cd tools && GOWORK=off $(GO) build -v -o $(BIN_DIR)/dranodectl ./cmd/dranodectl 2>&1 | $(PROGRESS)
	sed -e 's|@RUN@|$(RUN_DIR)|g' -e 's|@BIN@|$(BIN_DIR)|g' -e 's|@CLAIMS@|$(CURDIR)/examples/config/claims|g' \
	    -e "s|@GPU_SHA256@|$$(sha256sum $(BIN_DIR)/gpu-plugin | cut -d' ' -f1)|g" \
	    -e "s|@LOOP_SHA256@|$$(sha256sum $(BIN_DIR)/loop-plugin | cut -d' ' -f1)|g" \
	    examples/config/standalone.yaml > $(RUN_DIR)/agent.yaml
	$(BIN_DIR)/dranode-agent --config $(RUN_DIR)/agent.yaml
