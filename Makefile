# proxy-supervisor: build, demo, test and benchmark.
GO      ?= go
BIN     ?= bin
export CGO_ENABLED = 0
# The supervisor starts at its signal guard (cmd/proxy-supervisor/internal/
# earlysig/entry.go): every build of it passes this, images/ too.
ENTRY   = -E=proxy_supervisor_entry
# The build's version, commit and date, which --version prints and
# proxy_supervisor_build_info carries (scripts/version.sh says how each is
# found): the release tag's version (v0.1.0 gives 0.1.0), or VERSION's
# release with the commit after a + (0.1.0+g65c9c78a0984), or VERSION's
# alone outside git, so that a source archive builds the same version; the
# date is SOURCE_DATE_EPOCH's when set. Each is computed when first used,
# once, and only when not given (make VERSION=dev).
ifeq ($(origin VERSION),undefined)
VERSION    = $(eval VERSION := $(shell sh scripts/version.sh version))$(VERSION)
endif
ifeq ($(origin COMMIT),undefined)
COMMIT     = $(eval COMMIT := $(shell sh scripts/version.sh commit))$(COMMIT)
endif
ifeq ($(origin BUILD_DATE),undefined)
BUILD_DATE = $(eval BUILD_DATE := $(shell sh scripts/version.sh date))$(BUILD_DATE)
endif
LDFLAGS = -s -w $(ENTRY) -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(BUILD_DATE)
# An image tag cannot hold a +: the build metadata's + becomes _ there.
TAG     = $(subst +,_,$(VERSION))

.PHONY: build demo test tools manifests lint test-race test-static test-deploy test-kubelet kubelet-builds fuzz bench clean image docs release pin-bases

build:
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/proxy-supervisor ./cmd/proxy-supervisor
	cd e2e && $(GO) build -trimpath -o $(abspath $(BIN))/fake-envoy ./cmd/fake-envoy

# A local run of the pod lifecycle against the fake Envoy.
demo: build
	BIN=$(BIN) bash scripts/demo.sh

# Every check, one stage after the other, each between a line that names it
# and one that gives its result and time (scripts/stage.sh): go vet and
# gofmt; the deploy/ checks (test-deploy); pilot-agent from Istio's module,
# which e2e's comparison of drains and the kubelet suite run, built from
# deploytest/istioinject's go.mod with its flags so that it reuses what
# test-deploy compiled (under a minute then); every fuzz target for a few seconds
# (fuzz); the unit tests, the fake Envoy's tests and the pod-sandbox
# end-to-end tests under the race detector (test-race); the pod tests once
# more against the binaries as shipped (test-static); last the pods in a
# real kubelet (test-kubelet), whose table of scenarios ends the output.
# The kubelet and the control plane (kubelet-builds, about 23 minutes cold
# on 2 busy cores, nothing they compile shared with another stage) build in
# the background (scripts/background.sh) from the start: at niceness 0
# beside lint, test-deploy and pilot-agent, which compile too, then at 19
# from fuzz on, in the CPU the timed stages leave idle; the stage before
# test-kubelet waits for them (at niceness 0 then) and prints their log,
# their failure failing make test.
# The go test runs print through scripts/test-summary: a line per package with
# its counts, every skipped test with its reason, every failed test whole.
STAGE   = bash scripts/stage.sh
BG      = bash scripts/background.sh
SUMMARY = GO=$(GO) $(abspath $(BIN))/test-summary

# Each test binary's budget, per stage: the memory that it and the processes
# it starts hold (file cache aside; the race detector's shadow memory counts),
# and the disk that the files under its TMPDIR take. scripts/budget (go
# test's -exec) runs each binary in a memory cgroup of its own, with a hard
# limit a little above the budget, and a TMPDIR of its own; an overrun stops
# the binary and fails the test that was running, with the figure, and each
# package's line ends with its peaks. Measured peaks and the reasons for
# these figures: README's "More on the tests". Override one from the
# environment or make's command line: BUDGET_E2E_RACE="-memory 8GiB -disk 2GiB".
BUDGET_UNIT     ?= -memory 1GiB -disk 1GiB
# e2e's disk: TestLargeTerminationLogGetsTheLineAndHoldsNoExit fallocates a
# 16 GiB termination log (blocks reserved, never written): a cut that slow
# is what it holds the product to.
BUDGET_E2E_RACE ?= -memory 4GiB -disk 18GiB
BUDGET_E2E      ?= -memory 1GiB -disk 18GiB
BUDGET_DEPLOY   ?= -memory 1GiB -disk 512MiB
BUDGET_KUBELET  ?= -memory 6GiB -disk 4GiB
budget = -exec "$(abspath $(BIN))/budget -name $(1) $($(1))"

test: tools
	@BACKGROUND_NICE=0 $(BG) start kubelet-builds $$PPID $(MAKE) --no-print-directory kubelet-builds
	@$(STAGE) "go vet and gofmt" $(MAKE) --no-print-directory lint
	@$(STAGE) "deploy/ manifests, the chart, the Istio injector, Dockerfiles (deploytest/)" $(MAKE) --no-print-directory test-deploy
	@$(STAGE) "pilot-agent from Istio's module (scripts/pilot-agent.sh)" bash scripts/pilot-agent.sh
	@$(BG) nice kubelet-builds $$PPID 19
	@$(STAGE) "fuzz: every target for $(FUZZTIME)" $(MAKE) --no-print-directory fuzz
	@$(STAGE) "unit tests, then the fake Envoy's and the pod-sandbox tests (e2e/), under -race" $(MAKE) --no-print-directory test-race
	@$(STAGE) "pod-sandbox tests against the static binaries (e2e/)" $(MAKE) --no-print-directory test-static
	@$(STAGE) "the kubelet and the control plane, built in the background (kubelet-builds)" $(BG) wait kubelet-builds $$PPID
	@$(STAGE) "the deploy/ pods in a real kubelet (kubelettest/)" $(MAKE) --no-print-directory test-kubelet

# The test runs' printer (scripts/test-summary) and their budget
# (scripts/budget).
tools:
	$(GO) build -o $(BIN)/test-summary ./scripts/test-summary
	$(GO) build -o $(BIN)/budget ./scripts/budget

# go vet in the product's module and in the test module (e2e/); gofmt over
# the whole tree, deploytest/ and kubelettest/ included (their vet runs in
# their own targets); and the dependencies kubelettest/, deploytest/ and
# deploytest/istioinject share at one version each, so that test-kubelet
# reuses what test-deploy compiled (scripts/modshare.sh).
lint:
	$(GO) vet ./...
	cd e2e && $(GO) vet ./...
	test -z "$$(gofmt -l .)" || { gofmt -l .; exit 1; }
	bash scripts/modshare.sh

# The unit tests, then the test module (e2e/): the fake Envoy's tests and the
# pod-sandbox end-to-end tests (those need root for namespaces; they skip
# themselves otherwise), all under the race detector, which needs cgo and a
# C compiler. Under it the tests build race-instrumented binaries, so that a
# race in a process a test drives fails that test. The pod tests mostly wait
# on processes, so more of them run at once than there are cores.
test-race: tools
	CGO_ENABLED=1 $(SUMMARY) -race -count=1 -parallel 8 -timeout 20m $(call budget,BUDGET_UNIT) ./...
	cd e2e && CGO_ENABLED=1 $(SUMMARY) -race -count=1 -parallel 8 -timeout 20m $(call budget,BUDGET_E2E_RACE) ./...

# The pod tests once more against the binaries as shipped (static,
# CGO_ENABLED=0).
test-static: tools
	cd e2e && $(SUMMARY) -count=1 -parallel 8 -timeout 10m $(call budget,BUDGET_E2E) .

# The deploy/ manifests, the Istio injection template (rendered by Istio's
# own injector at the newest Istio release deploytest/istioinject names; at
# each of them under ISTIO_RELEASES=all, which make test leaves out: an older
# release compiles Istio's module again, about 20 cold minutes), the
# Dockerfiles and docs/lifecycle.svg, in their own modules (deploytest/ and
# the programs beside it) so that istio.io/istio and k8s.io/api never reach
# the binary's. A cold build takes minutes (Istio's module once per
# release); later runs use the build cache. The chart's checks run helm and
# kustomize, deploytest's go.mod tools, and deploytest/kubeapi against each
# Kubernetes release's API types; the Istio tests run istioinject. All are
# compiled here first, outside the tests' memory budget (the helm link alone
# would overrun it), into the build cache the tests then find them in; the
# tests link kubeapi and istioinject themselves (a link is never cached),
# which their budget allows for.
test-deploy: tools
	cd deploytest && $(GO) tool -n helm >/dev/null && $(GO) tool -n kustomize >/dev/null
	cd deploytest/kubeapi && $(GO) vet . && for m in go.1.*.mod go.mod; do $(GO) build -modfile=$$m -o /dev/null . || exit; done
	cd deploytest/istioinject && for m in go.mod $(if $(filter all,$(ISTIO_RELEASES)),go.1.*.mod); do $(GO) vet -modfile=$$m . && $(GO) build -modfile=$$m -o /dev/null . || exit; done
	cd deploytest && $(GO) vet ./... && $(SUMMARY) -count=1 -timeout 10m $(call budget,BUDGET_DEPLOY) ./...

# Renders charts/proxy-supervisor with its defaults into
# deploy/admission-policy/ (scripts/manifests.sh), which test-deploy checks.
manifests:
	bash scripts/manifests.sh

# The kubelet, the control plane and the release tools (scripts/tools.sh)
# alone, into the user's cache
# (kubelettest/cmd/kubelet-builds, which compiles none of the suite's client
# packages: deploytest/ compiles those beside it under make test; it builds
# nothing where the suite would skip), within the suite's budget as when
# the suite builds them.
kubelet-builds: tools
	cd kubelettest && $(GO) run -exec "$(abspath $(BIN))/budget -name BUDGET_KUBELET $(BUDGET_KUBELET)" ./cmd/kubelet-builds

# The deploy/ manifests' pods in a real kubelet (kubelettest/, its own module):
# containerd, runc and a standalone kubelet in their own namespaces. It needs
# root and Debian's containerd, runc, containernetworking-plugins and buildah
# (which builds images/ for its pods); without
# them it skips with one line saying what is missing (and fails under
# CI=true). The kubelet is built once into the user's cache (minutes cold),
# and pilot-agent (scripts/pilot-agent.sh) too, for the scenarios that run it
# as the supervisor's child, and the control plane of its cluster mode
# (kube-apiserver, kube-controller-manager, kube-scheduler: about 15 minutes
# cold on 2 busy cores) with Debian's etcd-server unpacked beside them.
# -timeout counts those builds too (TestMain makes them before any test;
# under make test, kubelet-builds has made the kubelet and the control plane).
# K8S_VERSION=1.36.3 (any release the module proxy has) builds and runs
# that Kubernetes instead of 1.37.2: its modules are made in the same cache,
# the scenarios of a newer release skip saying which one they need, and on
# 1.34 and 1.35 the API server turns on the v1beta1 admission policies.
# Its output ends with a table: each scenario's result, the pod's phases,
# the containers' exit codes and its timings. The pods mostly wait, so more
# tests run at once than there are cores: four a core, at most 16
# (KUBELET_PARALLEL; nproc does not see a CPU quota, and one node holds 110
# pods), and TestClusterRollout's rows two a core, at most 5. Sixteen at
# once on 2 cores kept the 1-minute load near 100, where a pod's app missed
# 5 s probes: a node past any real one (README, "More on the tests", gives
# the load it makes).
KUBELET_PARALLEL ?= $(shell n=$$(( $$(nproc) * 4 )); [ $$n -gt 16 ] && n=16; echo $$n)
test-kubelet: tools
	cd kubelettest && $(GO) vet ./... && $(SUMMARY) -count=1 -parallel $(KUBELET_PARALLEL) -timeout 60m $(call budget,BUDGET_KUBELET) ./...

# Every fuzz target for FUZZTIME each (3 s: about a minute and a half in
# all on 2 cores), after its seed corpus in testdata/fuzz/.
FUZZTIME ?= 3s
fuzz:
	FUZZTIME=$(FUZZTIME) bash scripts/fuzz.sh

# Regenerates docs/lifecycle.svg from docs/lifecycle.seq.
docs:
	cd deploytest && $(GO) run ./cmd/seqsvg ../docs/lifecycle.seq > ../docs/lifecycle.svg.tmp
	mv docs/lifecycle.svg.tmp docs/lifecycle.svg

# The proxy image (Istio's proxyv2 plus the binary), the client image (the
# binary alone) and the Envoy image (Envoy plus the binary, the admission
# policy's sidecar), for a machine with Docker and BuildKit (the build stage
# is FROM --platform=$BUILDPLATFORM); docs/images.md. test-kubelet
# builds the same Dockerfiles with buildah (the binary and the Istio image
# its own) and runs its pods on them.
# ISTIO_VERSION defaults to the ARG in images/proxy.Dockerfile.
# REGISTRY is images/release.env's, the one place that names it.
REGISTRY      ?= $(shell sed -n 's/^REGISTRY=//p' images/release.env)
ISTIO_VERSION ?= $(shell sed -n 's/^ARG ISTIO_VERSION=//p' images/proxy.Dockerfile)
BUILD_ARGS     = --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) --build-arg BUILD_DATE=$(BUILD_DATE)
image: export DOCKER_BUILDKIT = 1
image:
	docker build -f images/proxy.Dockerfile --build-arg ISTIO_VERSION=$(ISTIO_VERSION) \
		$(BUILD_ARGS) -t $(REGISTRY)/proxyv2:$(ISTIO_VERSION)-$(TAG) .
	docker build -f images/client.Dockerfile $(BUILD_ARGS) \
		-t $(REGISTRY)/client:$(TAG) .
	docker build -f images/envoy.Dockerfile $(BUILD_ARGS) \
		-t $(REGISTRY)/envoy:$(TAG) .

# Everything a release publishes, into dist/, each piece verified
# (scripts/release.sh; docs/release.md): the static binaries for linux/amd64
# and linux/arm64 with SHA256SUMS, the three images as multi-arch image
# indexes on their bases pinned by digest (images/release.env), an SPDX and
# a CycloneDX SBOM of every binary and image, and cosign's signatures and
# SBOM attestations, all in a registry of the release's own on loopback.
# Needs root and Debian's buildah; the tools come from tools/go.mod.
# RELEASE_BASES=standin builds on stand-in bases where docker.io is out of
# reach.
release:
	bash scripts/release.sh

# Writes the digests of the bases that images/envoy.Dockerfile and
# images/proxy.Dockerfile name into images/release.env, read from their
# registry (Debian's skopeo; needs the network).
pin-bases:
	bash scripts/pin-bases.sh

# Every benchmark beside its baselines (tini, dumb-init, pilot-agent, scuttle's
# pattern, the shell loops), then docs/benchmarks.md's current run and
# docs/benchmarks.svg. Needs root and a clean tree (PS_BENCH_DIRTY=1 measures
# uncommitted changes, marked as such); about 12 minutes.
bench: build
	bash scripts/bench.sh

clean:
	rm -rf $(BIN)
