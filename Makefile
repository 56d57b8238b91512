# proxy-supervisor: build, demo, test and benchmark.
GO      ?= go
BIN     ?= bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
export CGO_ENABLED = 0

.PHONY: build demo test bench fuzz clean image

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

# The proxy image (Istio's proxyv2 plus the binary) and the client image (the
# binary alone), for a machine with Docker; docs/images.md. Not run in CI.
# ISTIO_VERSION defaults to the ARG in images/proxy.Dockerfile.
REGISTRY      ?= proxy-supervisor
ISTIO_VERSION ?= $(shell sed -n 's/^ARG ISTIO_VERSION=//p' images/proxy.Dockerfile)
image:
	docker build -f images/proxy.Dockerfile --build-arg ISTIO_VERSION=$(ISTIO_VERSION) \
		--build-arg VERSION=$(VERSION) -t $(REGISTRY)/proxyv2:$(ISTIO_VERSION)-$(VERSION) .
	docker build -f images/client.Dockerfile --build-arg VERSION=$(VERSION) \
		-t $(REGISTRY)/client:$(VERSION) .

bench: build
	bash scripts/bench.sh

clean:
	rm -rf $(BIN)
