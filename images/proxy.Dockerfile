# syntax=docker/dockerfile:1

# The proxy image: Istio's proxyv2 with proxy-supervisor added at
# /usr/local/bin/proxy-supervisor. Build it from the repository root:
#
#   make image                                  # both images, default Istio
#   make image ISTIO_VERSION=1.31.1 REGISTRY=ghcr.io/me
#
# or by hand:
#
#   docker build -f images/proxy.Dockerfile --build-arg ISTIO_VERSION=1.31.1 .
#
# ISTIO_VERSION must be the version of the istiod that injects the pods: the
# injected arguments of pilot-agent and its bootstrap change between
# releases. Change the default below (make image reads it from here) or pass
# --build-arg; ISTIO_HUB points at a mirror of docker.io/istio.
ARG ISTIO_HUB=docker.io/istio
ARG ISTIO_VERSION=1.31.0
ARG GO_VERSION=1.26
# BINARY is where the binary comes from: the build stage below by default,
# or an image holding it at /out/proxy-supervisor (the real-kubelet suite,
# which builds offline, passes one with the binary it built).
ARG BINARY=build

# The build stage runs on the builder's own platform and cross-compiles
# for the image's (TARGETARCH): a multi-arch build needs no emulation.
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETOS=linux
ARG TARGETARCH
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd ./cmd
COPY internal ./internal
COPY VERSION ./
# make image passes VERSION, COMMIT and BUILD_DATE (scripts/version.sh);
# without them the version is the VERSION file's release, as a source
# archive's build says, and the commit and date are unknown.
ARG VERSION=
ARG COMMIT=
ARG BUILD_DATE=
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath \
    -ldflags "-s -w -E=proxy_supervisor_entry -X main.version=${VERSION:-$(cat VERSION)} -X main.commit=${COMMIT} -X main.date=${BUILD_DATE}" \
    -o /out/proxy-supervisor ./cmd/proxy-supervisor

FROM ${BINARY} AS binary

FROM ${ISTIO_HUB}/proxyv2:${ISTIO_VERSION}
ARG ISTIO_HUB
ARG ISTIO_VERSION
# OCI labels (make image and make release pass VERSION, COMMIT and
# BUILD_DATE; the base's name holds its digest where a release pins it).
ARG VERSION=
ARG COMMIT=
ARG BUILD_DATE=
LABEL org.opencontainers.image.title="proxy-supervisor proxyv2" \
      org.opencontainers.image.description="Istio's proxyv2 with proxy-supervisor added" \
      org.opencontainers.image.source="https://github.com/proxy-supervisor/proxy-supervisor" \
      org.opencontainers.image.url="https://github.com/proxy-supervisor/proxy-supervisor" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}" \
      org.opencontainers.image.created="${BUILD_DATE}" \
      org.opencontainers.image.base.name="${ISTIO_HUB}/proxyv2:${ISTIO_VERSION}"
COPY --from=binary /out/proxy-supervisor /usr/local/bin/proxy-supervisor
# No ENTRYPOINT or CMD here: the image keeps proxyv2's ENTRYPOINT,
# pilot-agent. istio-init and istio-validation run this same image with
# other arguments, so a pod's sidecar.istio.io/proxyImage, which reaches
# them too, changes nothing for them. The injection template starts
# proxy-supervisor through the container's command instead, on a native
# istio-proxy (or a classic one under client-image none).
