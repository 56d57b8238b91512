#!/usr/bin/env bash
# tools.sh: builds the release tools that tools/go.mod pins (syft, cosign,
# the CNCF distribution registry) once into the user's cache, a directory
# named for tools/go.sum and the Go release, and prints that directory.
# Minutes from a cold Go cache; a second call finds them built. The build's
# output goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
key=$( (cat tools/go.mod tools/go.sum; "$GO" env GOVERSION) | sha256sum | cut -c1-16)
dir=${XDG_CACHE_HOME:-$HOME/.cache}/proxy-supervisor-tools/$key
if [ ! -x "$dir/cosign" ] || [ ! -x "$dir/syft" ] || [ ! -x "$dir/registry" ]; then
  echo "tools: building syft, cosign and the registry into $dir (minutes from a cold Go cache)" >&2
  tmp=$dir.tmp$$
  mkdir -p "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  (cd tools && CGO_ENABLED=0 "$GO" build -trimpath -ldflags '-s -w' -o "$tmp/" \
    github.com/anchore/syft/cmd/syft \
    github.com/sigstore/cosign/v3/cmd/cosign \
    github.com/distribution/distribution/v3/cmd/registry) >&2
  rm -rf "$dir"
  mv "$tmp" "$dir"
fi
echo "$dir"
