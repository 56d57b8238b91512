# syntax=docker/dockerfile:1

# The Envoy image: Envoy's own image with proxy-supervisor added at
# /usr/local/bin/proxy-supervisor, beside /usr/local/bin/envoy. It is the
# one container of a native sidecar (deploy/envoy-sidecar/
# job-native-sidecar.yaml's, and the admission policy's in
# deploy/admission-policy/): `supervise --install DIR` copies the binary
# into the volume the app containers mount, so no install init container
# (and no client image) is needed. Build it from the repository root:
#
#   make image                                  # every image
#   docker build -f images/envoy.Dockerfile --build-arg ENVOY_VERSION=v1.38.3 .
ARG ENVOY_IMAGE=envoyproxy/envoy
ARG ENVOY_VERSION=v1.38.3
ARG GO_VERSION=1.26
# BINARY is where the binary comes from: the build stage below by default,
# or an image holding it at /out/proxy-supervisor.
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

FROM ${ENVOY_IMAGE}:${ENVOY_VERSION}
ARG ENVOY_IMAGE
ARG ENVOY_VERSION
# OCI labels (make image and make release pass VERSION, COMMIT and
# BUILD_DATE; the base's name holds its digest where a release pins it).
ARG VERSION=
ARG COMMIT=
ARG BUILD_DATE=
LABEL org.opencontainers.image.title="proxy-supervisor envoy" \
      org.opencontainers.image.description="Envoy's image with proxy-supervisor beside envoy" \
      org.opencontainers.image.source="https://github.com/proxy-supervisor/proxy-supervisor" \
      org.opencontainers.image.url="https://github.com/proxy-supervisor/proxy-supervisor" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}" \
      org.opencontainers.image.created="${BUILD_DATE}" \
      org.opencontainers.image.base.name="${ENVOY_IMAGE}:${ENVOY_VERSION}"
COPY --from=binary /out/proxy-supervisor /usr/local/bin/proxy-supervisor
# Envoy's image runs as root by default and its ENTRYPOINT starts envoy;
# the manifest or the policy gives the container its command and runAsUser
# (101, the image's envoy user), so neither is changed here.
