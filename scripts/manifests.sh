#!/usr/bin/env bash
# manifests.sh [DIR]: render charts/proxy-supervisor with its defaults into
# DIR (deploy/admission-policy/ by default), one file per template, as
# `kubectl apply -f` and the Kustomize base there take them. deploytest
# renders the chart the same way and fails when the files differ from it.
# Helm is deploytest's tool (deploytest/go.mod), built from the Go module
# proxy on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath "${1:-deploy/admission-policy}")
chart=$(pwd)/charts/proxy-supervisor
# The Kubernetes release the committed files are for: the newest this
# project tests (kubelettest/internal/builds' KubeletVersion).
kube=1.37.2
for t in mutating-policy validating-policy; do
	(cd deploytest && go tool helm template proxy-supervisor "$chart" --kube-version "$kube" \
		--show-only "templates/$t.yaml") >"$out/$t.yaml.tmp"
	mv "$out/$t.yaml.tmp" "$out/$t.yaml"
done
