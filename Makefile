# proxy-supervisor: build, demo, test and benchmark.
GO      ?= go
BIN     ?= bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
export CGO_ENABLED = 0

.PHONY: build demo test tools lint test-race test-static test-deploy test-kubelet fuzz bench clean image docs

build:
	$(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o $(BIN)/proxy-supervisor ./cmd/proxy-supervisor
	cd e2e && $(GO) build -trimpath -o $(abspath $(BIN))/fake-envoy ./cmd/fake-envoy

# A local run of the pod lifecycle against the fake Envoy.
demo: build
	BIN=$(BIN) bash scripts/demo.sh

# Every check, one stage after the other, each between a line that names it
# and one that gives its result and time (scripts/stage.sh): go vet and
# gofmt; the deploy/ checks (test-deploy); every fuzz target for a few
# seconds (fuzz); pilot-agent from Istio's module, which e2e's comparison of
# drains and the kubelet suite run (a minute cold); the unit tests, the fake
# Envoy's tests and the pod-sandbox
# end-to-end tests under the race detector (test-race); the pod tests once
# more against the binaries as shipped (test-static); last the pods in a
# real kubelet (test-kubelet), whose table of scenarios ends the output.
# The go test runs print through scripts/test-summary: a line per package with
# its counts, every skipped test with its reason, every failed test whole.
STAGE   = bash scripts/stage.sh
SUMMARY = GO=$(GO) $(abspath $(BIN))/test-summary

test: tools
	@$(STAGE) "go vet and gofmt" $(MAKE) --no-print-directory lint
	@$(STAGE) "deploy/ manifests, the Istio injector, Dockerfiles (deploytest/)" $(MAKE) --no-print-directory test-deploy
	@$(STAGE) "fuzz: every target for $(FUZZTIME)" $(MAKE) --no-print-directory fuzz
	@$(STAGE) "pilot-agent from Istio's module (scripts/pilot-agent.sh)" bash scripts/pilot-agent.sh
	@$(STAGE) "unit tests, then the fake Envoy's and the pod-sandbox tests (e2e/), under -race" $(MAKE) --no-print-directory test-race
	@$(STAGE) "pod-sandbox tests against the static binaries (e2e/)" $(MAKE) --no-print-directory test-static
	@$(STAGE) "the deploy/ pods in a real kubelet (kubelettest/)" $(MAKE) --no-print-directory test-kubelet

# The test runs' printer (scripts/test-summary).
tools:
	$(GO) build -o $(BIN)/test-summary ./scripts/test-summary

# go vet in the product's module and in the test module (e2e/); gofmt over
# the whole tree, deploytest/ and kubelettest/ included (their vet runs in
# their own targets).
lint:
	$(GO) vet ./...
	cd e2e && $(GO) vet ./...
	test -z "$$(gofmt -l .)" || { gofmt -l .; exit 1; }

# The unit tests, then the test module (e2e/): the fake Envoy's tests and the
# pod-sandbox end-to-end tests (those need root for namespaces; they skip
# themselves otherwise), all under the race detector, which needs cgo and a
# C compiler. Under it the tests build race-instrumented binaries, so that a
# race in a process a test drives fails that test. The pod tests mostly wait
# on processes, so more of them run at once than there are cores.
test-race: tools
	CGO_ENABLED=1 $(SUMMARY) -race -count=1 -parallel 8 -timeout 20m ./...
	cd e2e && CGO_ENABLED=1 $(SUMMARY) -race -count=1 -parallel 8 -timeout 20m ./...

# The pod tests once more against the binaries as shipped (static,
# CGO_ENABLED=0).
test-static: tools
	cd e2e && $(SUMMARY) -count=1 -parallel 8 -timeout 10m .

# The deploy/ manifests, the Istio injection template (rendered by Istio's
# own injector), the Dockerfiles and docs/lifecycle.svg, in their own module
# (deploytest/) so that istio.io/istio and k8s.io/api never reach the
# binary's. A cold build of it takes minutes; later runs use the build cache.
test-deploy: tools
	cd deploytest && $(GO) vet ./... && $(SUMMARY) -count=1 -timeout 10m ./...

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
# -timeout counts those builds too (TestMain makes them before any test).
# Its output ends with a table: each scenario's result, the pod's phases,
# the containers' exit codes and its timings. The pods mostly wait, so all
# of them run at once.
test-kubelet: tools
	cd kubelettest && $(GO) vet ./... && $(SUMMARY) -count=1 -parallel 16 -timeout 60m ./...

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
# policy's sidecar), for a machine with Docker; docs/images.md. test-kubelet
# builds the same Dockerfiles with buildah (the binary and the Istio image
# its own) and runs its pods on them.
# ISTIO_VERSION defaults to the ARG in images/proxy.Dockerfile.
REGISTRY      ?= proxy-supervisor
ISTIO_VERSION ?= $(shell sed -n 's/^ARG ISTIO_VERSION=//p' images/proxy.Dockerfile)
image:
	docker build -f images/proxy.Dockerfile --build-arg ISTIO_VERSION=$(ISTIO_VERSION) \
		--build-arg VERSION=$(VERSION) -t $(REGISTRY)/proxyv2:$(ISTIO_VERSION)-$(VERSION) .
	docker build -f images/client.Dockerfile --build-arg VERSION=$(VERSION) \
		-t $(REGISTRY)/client:$(VERSION) .
	docker build -f images/envoy.Dockerfile --build-arg VERSION=$(VERSION) \
		-t $(REGISTRY)/envoy:$(VERSION) .

# Every benchmark beside its baselines (tini, dumb-init, pilot-agent, scuttle's
# pattern, the shell loops), then docs/benchmarks.md's current run and
# docs/benchmarks.svg. Needs root and a clean tree (PS_BENCH_DIRTY=1 measures
# uncommitted changes, marked as such); about 12 minutes.
bench: build
	bash scripts/bench.sh

clean:
	rm -rf $(BIN)
