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
# (those need root for namespaces; they skip themselves otherwise).
test:
	$(GO) vet ./...
	test -z "$$(gofmt -l .)" || { gofmt -l .; exit 1; }
	$(GO) test -count=1 -timeout 15m ./...

bench: build
	bash scripts/bench.sh

clean:
	rm -rf $(BIN)
