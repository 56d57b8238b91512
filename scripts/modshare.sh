#!/usr/bin/env bash
# modshare.sh: fails when kubelettest/'s tests would compile a dependency
# that deploytest/'s tests compiled already, at another version. Both
# import k8s.io/api, apimachinery and client-go (with their own
# dependencies, about 350 packages), and both build as go test does
# (CGO_ENABLED=0, no -trimpath), so when every module that provides one of
# kubelettest's packages is at the version deploytest selects, Go's build
# cache gives the kubelet stage what the deploytest stage compiled; one
# module at another version recompiles it and all that imports it (minutes
# cold). scripts/pilot-agent.sh holds the same for pilot-agent by
# building it from deploytest's go.mod. make lint runs this.
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C
drift=$(join <(go -C kubelettest list -deps -test -f '{{with .Module}}{{.Path}} {{.Version}}{{end}}' ./... | sort -u) \
  <(go -C deploytest list -m -f '{{.Path}} {{.Version}}' all | sort) | awk '$2 != $3')
if [ -n "$drift" ]; then
  echo "modshare: kubelettest/ builds these modules at other versions than deploytest/ (module, kubelettest's, deploytest's),"
  echo "so the kubelet stage compiles them, and what imports them, a second time:"
  echo "$drift"
  echo "modshare: require deploytest's versions in kubelettest/go.mod (go -C kubelettest get MODULE@VERSION && go -C kubelettest mod tidy)"
  exit 1
fi
