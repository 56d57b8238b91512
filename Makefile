# proxy-supervisor: build, demo, test and benchmark.
GO      ?= go
BIN     ?= bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
export CGO_ENABLED = 0

.PHONY: build demo test bench fuzz clean

build:
	$(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o $(BIN)/proxy-supervisor ./cmd/proxy-supervisor
	$(GO) build -trimpath -o $(BIN)/fake-envoy ./cmd/fake-envoy

# A local run of the pod lifecycle against the fake Envoy.
demo: build
	BIN=$(BIN) bash scripts/demo.sh

# Unit tests, the fake Envoy's tests and the pod-sandbox end-to-end tests
# (those need root for namespaces; they skip themselves otherwise), all under
# the race detector, which needs cgo and a C compiler. Under it the tests
# build race-instrumented binaries, so that a race in a process a test drives
# fails that test. Then the pod tests once more against the binaries as
# shipped (static, CGO_ENABLED=0). The pod tests mostly wait on processes,
# so more of them run at once than there are cores.
test:
	$(GO) vet ./...
	test -z "$$(gofmt -l .)" || { gofmt -l .; exit 1; }
	CGO_ENABLED=1 $(GO) test -race -count=1 -parallel 8 -timeout 20m ./...
	$(GO) test -count=1 -parallel 8 -timeout 10m ./e2e/

bench: build
	bash scripts/bench.sh

clean:
	rm -rf $(BIN)
