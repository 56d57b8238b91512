#!/usr/bin/env bash
# Builds Istio's pilot-agent, once per istio.io/istio version (the one
# deploytest/go.mod requires) and Go version, and prints the binary's path.
# make bench measures it as a peer; the real-kubelet suite runs it as the
# supervisor's child, with Istio's Envoy bootstrap template, which is put
# beside it (envoy_bootstrap_tmpl.json).
#
#   bash scripts/pilot-agent.sh [CACHE_DIR]
#
# CACHE_DIR defaults to the user's cache, beside the kubelet the suite
# builds: ${XDG_CACHE_HOME:-~/.cache}/proxy-supervisor-pilot-agent. The
# build is a throwaway module of its own (so that neither go.mod gains
# istio's build-only requirements), seeded with deploytest's go.sum. About a
# minute from a cold Go build cache; cached, nothing. Progress goes to
# stderr, the path alone to stdout; exit 1 when it does not build (no module
# proxy, say).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/proxy-supervisor-pilot-agent}
istio=$(awk '$1 == "istio.io/istio" {print $2; exit}' "$root/deploytest/go.mod")
if [ -z "$istio" ]; then
  echo "pilot-agent: no istio.io/istio requirement in deploytest/go.mod" >&2
  exit 1
fi
dir=$cache/$istio-$(go env GOVERSION)
agent=$dir/pilot-agent
tmpl=$dir/envoy_bootstrap_tmpl.json
if [ ! -x "$agent" ] || [ ! -f "$tmpl" ]; then
  echo "pilot-agent: building istio.io/istio $istio into $dir (a minute or so from a cold Go cache)" >&2
  # A module and outputs per run: concurrent builds never share one.
  mod=$dir/mod.$$
  mkdir -p "$mod"
  trap 'rm -rf "$mod" "$agent.tmp$$" "$tmpl.tmp$$"' EXIT
  cp "$root/deploytest/go.sum" "$mod/"
  printf 'module pilotagentbuild\n\ngo 1.26.0\n\nrequire istio.io/istio %s\n' "$istio" >"$mod/go.mod"
  if ! (cd "$mod" && go get "istio.io/istio/pilot/cmd/pilot-agent@$istio" >&2 &&
    CGO_ENABLED=0 go build -trimpath -o "$agent.tmp$$" istio.io/istio/pilot/cmd/pilot-agent >&2 &&
    src=$(go list -m -f '{{.Dir}}' istio.io/istio) &&
    install -m 0644 "$src/tools/packaging/common/envoy_bootstrap.json" "$tmpl.tmp$$"); then
    echo "pilot-agent: istio.io/istio $istio did not build" >&2
    exit 1
  fi
  mv "$tmpl.tmp$$" "$tmpl"
  mv "$agent.tmp$$" "$agent"
fi
echo "$agent"
