#!/usr/bin/env bash
# Builds Istio's pilot-agent, once per istio.io/istio version (the newest
# Istio deploytest injects with: deploytest/istioinject/go.mod's) and Go
# version, and prints the binary's path.
# make bench measures it as a peer; the real-kubelet suite runs it as the
# supervisor's child, with Istio's Envoy bootstrap template, which is put
# beside it (envoy_bootstrap_tmpl.json).
#
#   bash scripts/pilot-agent.sh [CACHE_DIR]
#
# CACHE_DIR defaults to the user's cache, beside the kubelet the suite
# builds: ${XDG_CACHE_HOME:-~/.cache}/proxy-supervisor-pilot-agent. The
# build is a throwaway module of its own (so that neither go.mod gains
# istio's build-only requirements) whose go.mod and go.sum are istioinject's,
# and it is built as deploytest builds istioinject (CGO_ENABLED=0, no
# -trimpath): so every package it shares with it (about 360 of its 460, Kubernetes'
# and Envoy's API types, gRPC and Istio's own among them) is the same
# version built with the same flags, which Go's build cache hands over
# instead of compiling it again. After make test-deploy a cold build
# compiles about a hundred packages (under a minute); before it, all of
# Istio's module (minutes); cached, nothing. Progress goes to stderr, the
# path alone to stdout; exit 1 when it does not build (no module proxy,
# say).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/proxy-supervisor-pilot-agent}
inject=$root/deploytest/istioinject
istio=$(awk '$1 == "istio.io/istio" {print $2; exit}' "$inject/go.mod")
if [ -z "$istio" ]; then
  echo "pilot-agent: no istio.io/istio requirement in deploytest/istioinject/go.mod" >&2
  exit 1
fi
# shared warns, without failing, of every module that the build selects at
# another version than the module in $1 does: each such module, and every
# package that imports it, would be compiled a second time.
shared() {
  local drift
  drift=$(LC_ALL=C join <(go -C "$1" list -m -f '{{.Path}} {{.Version}}' all | LC_ALL=C sort) \
    <(go list -m -f '{{.Path}} {{.Version}}' all | LC_ALL=C sort) | awk '$2 != $3')
  if [ -n "$drift" ]; then
    echo "pilot-agent: warning: these modules are not istioinject's versions (module, istioinject's, here), so what imports them is compiled twice:" >&2
    echo "$drift" >&2
  fi
}
dir=$cache/$istio-$(go env GOVERSION)
agent=$dir/pilot-agent
tmpl=$dir/envoy_bootstrap_tmpl.json
if [ ! -x "$agent" ] || [ ! -f "$tmpl" ]; then
  echo "pilot-agent: building istio.io/istio $istio into $dir (under a minute after istioinject's build, minutes from a cold Go cache)" >&2
  # A module and outputs per run: concurrent builds never share one.
  mod=$dir/mod.$$
  mkdir -p "$mod"
  trap 'rm -rf "$mod" "$agent.tmp$$" "$tmpl.tmp$$"' EXIT
  # istioinject's requirements, so that the module graph selects its
  # versions. go get adds only the modules of pilot-agent's packages that
  # istioinject does not import, at the versions the graph already selects.
  cp "$inject/go.mod" "$inject/go.sum" "$mod/"
  if ! (cd "$mod" && go mod edit -module pilotagentbuild &&
    go get "istio.io/istio/pilot/cmd/pilot-agent@$istio" >&2 &&
    shared "$inject" >&2 &&
    CGO_ENABLED=0 go build -o "$agent.tmp$$" istio.io/istio/pilot/cmd/pilot-agent >&2 &&
    src=$(go list -m -f '{{.Dir}}' istio.io/istio) &&
    install -m 0644 "$src/tools/packaging/common/envoy_bootstrap.json" "$tmpl.tmp$$"); then
    echo "pilot-agent: istio.io/istio $istio did not build" >&2
    exit 1
  fi
  mv "$tmpl.tmp$$" "$tmpl"
  mv "$agent.tmp$$" "$agent"
fi
echo "$agent"
