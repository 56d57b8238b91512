# syntax=docker/dockerfile:1

# The client image: the static proxy-supervisor binary alone, run as a
# non-root user. Its job is an init container that copies the binary into a
# shared emptyDir for app containers that mount it read-only:
#
#   command: [/proxy-supervisor, install, /opt/proxy-supervisor/bin]
#
# Build it from the repository root with `make image`, or:
#
#   docker build -f images/client.Dockerfile .
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

FROM scratch
# OCI labels (make image and make release pass VERSION, COMMIT and
# BUILD_DATE).
ARG VERSION=
ARG COMMIT=
ARG BUILD_DATE=
LABEL org.opencontainers.image.title="proxy-supervisor client" \
      org.opencontainers.image.description="The static proxy-supervisor binary, for the init container that installs it into a pod" \
      org.opencontainers.image.source="https://github.com/proxy-supervisor/proxy-supervisor" \
      org.opencontainers.image.url="https://github.com/proxy-supervisor/proxy-supervisor" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}" \
      org.opencontainers.image.created="${BUILD_DATE}"
COPY --from=binary /out/proxy-supervisor /proxy-supervisor
# 65532 is the conventional "nonroot" uid of distroless images; any non-root
# uid works, since install only writes into the volume it is given.
USER 65532:65532
ENTRYPOINT ["/proxy-supervisor"]
CMD ["version"]
