#!/usr/bin/env bash
# modshare.sh: fails when two of the test modules would compile one
# dependency at two versions. deploytest/istioinject (istiod's injector at
# the newest Istio, which make test-deploy builds first) and kubelettest/'s
# tests import k8s.io/api, apimachinery and client-go (with their own
# dependencies, about 350 packages), deploytest/'s tests the API types, and
# all build as go test does (CGO_ENABLED=0, no -trimpath), so when every module
# that provides a package two of them compile is at one version, Go's build
# cache gives the later stage what the earlier compiled; one module at
# another version recompiles it and all that imports it (minutes cold).
# scripts/pilot-agent.sh holds the same for pilot-agent by building it from
# istioinject's go.mod. make lint runs this.
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C
# Each module's list: "module version" for each module that provides a
# package it compiles, in a file of its own, listed once. A go list that
# fails fails the check (command substitution would hide it).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
list() { # $1: the module's dir, $2: the list's name, $3: go list's flags
  go -C "$1" list -deps ${3:-} -f '{{with .Module}}{{.Path}} {{.Version}}{{end}}' ./... >"$tmp/$2.raw"
  sort -u "$tmp/$2.raw" >"$tmp/$2"
}
list deploytest/istioinject istioinject
list deploytest deploytest -test
list kubelettest kubelettest -test
failed=0
check() { # $1, $2: two lists' names
  local drift
  drift=$(join "$tmp/$1" "$tmp/$2" | awk '$2 != $3')
  if [ -n "$drift" ]; then
    echo "modshare: $1 and $2 compile these modules at two versions (module, $1's, $2's),"
    echo "so a later stage compiles them, and what imports them, a second time:"
    echo "$drift"
    echo "modshare: require one version in both (go -C DIR get MODULE@VERSION && go -C DIR mod tidy)"
    failed=1
  fi
}
check istioinject kubelettest
check istioinject deploytest
check deploytest kubelettest
exit $failed
