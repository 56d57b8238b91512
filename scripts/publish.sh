#!/usr/bin/env bash
# publish.sh: the release job's last step, after make release. Copies each
# image index of dist/images.txt from the release's registry (dist/registry)
# to REGISTRY (images/release.env) by digest, unchanged (skopeo copy --all
# --preserve-digests), then signs each there (cosign sign --recursive) and
# attests each platform's SBOMs from dist/sbom/, and verifies both; and the
# Helm chart of dist/charts.txt the same way, signed and verified.
#
# Signing is keyless (the job's OIDC identity, recorded in Rekor), as the
# maintainers' release workflow runs it; PUBLISH_KEY=FILE signs with that
# cosign key instead, and PUBLISH_REGISTRY=HOST/PATH publishes elsewhere (a
# mirror of your own; PUBLISH_INSECURE=1 for plain HTTP). It refuses a
# release built on stand-in bases, but with PUBLISH_STANDIN=1 (a test of
# this script against a registry of your own). Needs root (the release's
# registry runs in a PID namespace), Debian's skopeo and the network.
set -euo pipefail
cd "$(dirname "$0")/.."
. images/release.env
step=publish
. scripts/steps.sh
GO=${GO:-go}
dist=${DIST:-dist}
[[ $dist == /* ]] || dist=$PWD/$dist
work=$dist/.publish
target=${PUBLISH_REGISTRY:-$REGISTRY}
[ -s "$dist/images.txt" ] || fail "no $dist/images.txt: run make release first"
[ -n "${PUBLISH_STANDIN:-}" ] || ! grep -q 'stand-in' "$dist/images.txt" || fail "this release was built on stand-in bases (RELEASE_BASES=standin): not for publishing"
command -v skopeo >/dev/null || fail "needs skopeo (apt-get install skopeo)"
version=$(sh scripts/version.sh version)
commit=$(sh scripts/version.sh commit)

rm -rf "$work"
mkdir -p "$work"
tools=$(bash scripts/tools.sh)
"$GO" build -o "$work/releasecheck" ./scripts/releasecheck
cosign() { "$tools/cosign" "$@"; }
. scripts/registry.sh
trap stop_registry EXIT
start_registry "$tools/registry" "$dist/registry" "$work/registry.log" || fail "the release's registry did not start"

sign=()
verify=()
if [ -n "${PUBLISH_KEY:-}" ]; then
  sign=(--key "$PUBLISH_KEY" --use-signing-config=false --tlog-upload=false)
  cosign public-key --key "$PUBLISH_KEY" > "$work/key.pub"
  verify=(--key "$work/key.pub" --insecure-ignore-tlog=true)
else
  # Keyless: the identity is the workflow that runs on this repository.
  verify=(--certificate-identity-regexp '^https://github\.com/proxy-supervisor/proxy-supervisor/\.github/workflows/release\.yml@refs/tags/v'
    --certificate-oidc-issuer https://token.actions.githubusercontent.com)
fi
dst_tls=()
if [ -n "${PUBLISH_INSECURE:-}" ]; then
  dst_tls=(--dest-tls-verify=false)
  sign+=(--allow-insecure-registry --allow-http-registry)
  verify+=(--allow-insecure-registry --allow-http-registry)
fi

while read -r line _; do
  ref=${line%@*} digest=${line#*@}
  path=${ref#"$REGISTRY"/} name=${path%%:*}
  src=$reg/${REGISTRY#*/}/$name@$digest
  dst=$target/$path
  skopeo copy -q --all --preserve-digests --src-tls-verify=false "${dst_tls[@]}" "docker://$src" "docker://$dst"
  "$work/releasecheck" index "$reg" "${REGISTRY#*/}/$name" "$digest" "$version" "$commit" - $PLATFORMS > "$work/platforms"
  quiet "cosign sign ${dst%:*}@$digest" cosign sign -y --recursive "${sign[@]}" "${dst%:*}@$digest"
  quiet "cosign verify ${dst%:*}@$digest" cosign verify "${verify[@]}" "${dst%:*}@$digest"
  while read -r p pd; do
    for t in "spdxjson spdx" "cyclonedx cdx"; do
      read -r type ext <<<"$t"
      sbom=$dist/sbom/$name-${p/\//-}.$ext.json
      for at in "$pd" "$digest"; do # the platform's image, and the index
        quiet "cosign attest --type $type ${dst%:*}@$at" cosign attest -y "${sign[@]}" --type "$type" --predicate "$sbom" "${dst%:*}@$at"
        quiet "cosign verify-attestation --type $type ${dst%:*}@$at" cosign verify-attestation "${verify[@]}" --type "$type" "${dst%:*}@$at"
      done
    done
  done < "$work/platforms"
  say "$dst@$digest: copied, signed, SBOMs attested, verified"
done < "$dist/images.txt"
# The chart (dist/charts.txt): the OCI artifact copied by digest, unchanged,
# then signed there and verified, as the images are.
if [ -s "$dist/charts.txt" ]; then
  read -r line < "$dist/charts.txt"
  ref=${line%@*} digest=${line#*@}
  path=${ref#"$REGISTRY"/}
  dst=$target/$path
  skopeo copy -q --preserve-digests --src-tls-verify=false "${dst_tls[@]}" "docker://$reg/${REGISTRY#*/}/${path%%:*}@$digest" "docker://$dst"
  quiet "cosign sign ${dst%:*}@$digest" cosign sign -y "${sign[@]}" "${dst%:*}@$digest"
  quiet "cosign verify ${dst%:*}@$digest" cosign verify "${verify[@]}" "${dst%:*}@$digest"
  say "$dst@$digest: the chart, copied, signed, verified"
fi
rm -rf "$work"
