#!/usr/bin/env bash
# pin-bases.sh: make pin-bases. Reads from their registry the digests of the
# image indexes that images/envoy.Dockerfile (ENVOY_IMAGE:ENVOY_VERSION) and
# images/proxy.Dockerfile (ISTIO_HUB/proxyv2:ISTIO_VERSION) name, and writes
# them into images/release.env, which make release builds on. Run it when a
# Dockerfile's base changes, and commit the result: the digest, not the tag,
# is what a release is built on. Needs the network and Debian's skopeo.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
command -v skopeo >/dev/null || { echo "pin-bases: needs skopeo (apt-get install skopeo)" >&2; exit 1; }

# digest REF: the sha256 of the manifest (an image index, for a multi-arch
# image) that REF names, as its registry serves it.
digest() {
  local raw=$tmp/manifest
  skopeo inspect --raw "docker://$1" > "$raw" || { echo "pin-bases: cannot read $1" >&2; exit 1; }
  grep -q '"manifests"' "$raw" || { echo "pin-bases: $1 is not a multi-arch image index" >&2; exit 1; }
  printf 'sha256:%s' "$(sha256sum < "$raw" | cut -d' ' -f1)"
}
arg() { sed -n "s/^ARG $1=//p" "$2"; }
envoy=$(arg ENVOY_IMAGE images/envoy.Dockerfile):$(arg ENVOY_VERSION images/envoy.Dockerfile)
istio=$(arg ISTIO_HUB images/proxy.Dockerfile)/proxyv2:$(arg ISTIO_VERSION images/proxy.Dockerfile)
e=$(digest "$envoy")
i=$(digest "$istio")
sed -i "s/^ENVOY_BASE_DIGEST=.*/ENVOY_BASE_DIGEST=$e/; s/^ISTIO_BASE_DIGEST=.*/ISTIO_BASE_DIGEST=$i/" images/release.env
echo "pin-bases: $envoy@$e"
echo "pin-bases: $istio@$i"
