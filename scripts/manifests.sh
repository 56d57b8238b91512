#!/usr/bin/env bash
# manifests.sh: bring deploy/ and the chart to the names that one place
# gives, then render the chart into deploy/admission-policy/.
#
#   images/release.env's REGISTRY  the registry of every image of ours
#   VERSION                        their tag, and the chart's version
#   images/envoy.Dockerfile's      the Envoy release the plain-Envoy
#     ENVOY_VERSION                manifests run (never a -latest tag)
#
# The images' names (REGISTRY/client:VERSION, REGISTRY/envoy:VERSION,
# REGISTRY/proxyv2:<Istio's tag>-VERSION) are rewritten in place in deploy/
# and in the chart's values and Chart.yaml; deploytest fails when any of
# them is not what these give (run make manifests after changing one).
#
# manifests.sh DIR renders the chart into DIR alone, changing nothing, as
# deploytest does to compare. Helm is deploytest's tool (deploytest/go.mod),
# built from the Go module proxy on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
chart=$(pwd)/charts/proxy-supervisor

if [ $# -eq 0 ]; then
	registry=$(sed -n 's/^REGISTRY=//p' images/release.env)
	version=$(tr -d ' \n' <VERSION)
	envoy=$(sed -n 's/^ARG ENVOY_VERSION=//p' images/envoy.Dockerfile)
	for v in registry version envoy; do
		[ -n "${!v}" ] || { echo "manifests: no $v (images/release.env, VERSION, images/envoy.Dockerfile)" >&2; exit 1; }
	done
	# An image of ours is a name that ends in /client, /envoy or /proxyv2 with
	# a tag, whatever its registry, but Envoy's own (envoyproxy/envoy), which
	# takes the Envoy release instead (proxy-supervisor.io/... annotations
	# have no such form). perl, for the lookarounds sed lacks.
	REGISTRY=$registry VERSION=$version ENVOY=$envoy perl -pi -e '
		s{(?<![\w./:-])(?!envoyproxy/)[a-z0-9.:-]+(?:/[a-z0-9._-]+)*/(client|envoy):[A-Za-z0-9_.-]+}{$ENV{REGISTRY}/$1:$ENV{VERSION}}g;
		s{(?<![\w./:-])(?!envoyproxy/)[a-z0-9.:-]+(?:/[a-z0-9._-]+)*/proxyv2:%s-[A-Za-z0-9_.-]+}{$ENV{REGISTRY}/proxyv2:%s-$ENV{VERSION}}g;
		s{(?<![\w./:-])envoyproxy/envoy:v[0-9][A-Za-z0-9_.-]*}{envoyproxy/envoy:$ENV{ENVOY}}g;
	' deploy/envoy-sidecar/*.yaml deploy/istio/*.yaml deploy/admission-policy/job.yaml
	sed -E -i -e "s#^(  registry: ).*#\1${registry}#" "$chart/values.yaml"
	sed -E -i -e "s#^(version|appVersion): .*#\1: ${version}#" "$chart/Chart.yaml"
	set -- deploy/admission-policy
fi

out=$(realpath "$1")
# The Kubernetes release the committed files are for: the newest this
# project tests (kubelettest/internal/builds' KubeletVersion).
kube=1.37.2
for t in mutating-policy validating-policy; do
	(cd deploytest && go tool helm template proxy-supervisor "$chart" --kube-version "$kube" \
		--show-only "templates/$t.yaml") >"$out/$t.yaml.tmp"
	mv "$out/$t.yaml.tmp" "$out/$t.yaml"
done
