#!/usr/bin/env bash
# release.sh: make release. Builds into dist/ everything a release
# publishes, and verifies each piece, failing at the first check that fails:
#
#   dist/proxy-supervisor-linux-{amd64,arm64}   static binaries, and SHA256SUMS
#   dist/sbom/*.spdx.json, *.cdx.json           an SPDX and a CycloneDX SBOM of
#                                               each binary and each image's
#                                               every platform (syft)
#   dist/images.txt                             each image index, by digest
#   dist/proxy-supervisor-VERSION.tgz           the Helm chart, also pushed
#                                               as an OCI artifact
#   dist/charts.txt                             that artifact, by digest
#   dist/cosign.pub                             the key that signed them
#   dist/registry/                              the registry that holds the
#                                               images, their signatures and
#                                               their SBOM attestations
#                                               (unless RELEASE_REGISTRY)
#
# The images (images/client, envoy and proxy Dockerfiles) are multi-arch
# image indexes built with Debian's buildah, without emulation: the
# binaries are cross-compiled first and each platform's image takes its
# own. They are pushed to a registry of the release's own (the CNCF
# distribution registry, on loopback, in a PID namespace of its own, its
# storage dist/registry), signed with cosign (with --recursive: the index
# and each platform's image), and each platform's SBOMs attested to it; then
# every signature and attestation is verified against dist/cosign.pub.
# RELEASE_REGISTRY=HOST:PORT pushes to that registry instead (plain HTTP,
# one of the caller's: the real-kubelet suite's, on its node's loopback).
# syft, cosign and the registry are built from tools/go.mod, pinned there,
# once into the user's cache (scripts/tools.sh).
#
# The key: COSIGN_KEY (a cosign private key; COSIGN_PASSWORD its password),
# else a key pair made for this run, whose private half goes with the run.
# The maintainers' release job signs keyless instead (docs/release.md).
#
# The bases: images/release.env pins the Envoy and Istio images by digest,
# and the release refuses a base without one. RELEASE_BASES=standin builds
# on stand-ins instead, made here and pushed to the release's registry
# first, pinned by the digests it gives them: a release that cannot reach
# docker.io (as this machine) still builds, pins, signs and verifies every
# piece, but its envoy and proxyv2 images are not Envoy's or Istio's, and
# images.txt says so.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
. images/release.env

GO=${GO:-go}
dist=${DIST:-dist}
[[ $dist == /* ]] || dist=$root/$dist
work=$dist/.work
step=release
. scripts/steps.sh

version=$(sh scripts/version.sh version)
commit=$(sh scripts/version.sh commit)
date=$(sh scripts/version.sh date)
tag=${version//+/_}
[ -n "$commit" ] || fail "not a git work tree: a release is built from a commit"
istio_version=$(sed -n 's/^ARG ISTIO_VERSION=//p' images/proxy.Dockerfile)
envoy_image=$(sed -n 's/^ARG ENVOY_IMAGE=//p' images/envoy.Dockerfile)
envoy_version=$(sed -n 's/^ARG ENVOY_VERSION=//p' images/envoy.Dockerfile)
istio_hub=$(sed -n 's/^ARG ISTIO_HUB=//p' images/proxy.Dockerfile)
bases=${RELEASE_BASES:-pinned}
case $bases in
pinned)
  [ -n "$ENVOY_BASE_DIGEST" ] || fail "images/release.env pins no digest for $envoy_image:$envoy_version (make pin-bases)"
  [ -n "$ISTIO_BASE_DIGEST" ] || fail "images/release.env pins no digest for $istio_hub/proxyv2:$istio_version (make pin-bases)"
  ;;
standin) ;;
*) fail "RELEASE_BASES=$bases: want pinned or standin" ;;
esac

case $work/ in
/var/lib/* | /run/*) fail "$work is under /var/lib or /run, which buildah's mount namespace replaces: build elsewhere (DIST=...)" ;;
esac
rm -rf "$dist"
mkdir -p "$dist/sbom" "$work/tmp"
. scripts/registry.sh
# A failed run keeps $work to look at, but never the run's private key.
trap 'stop_registry; rm -f "$work/cosign.key"' EXIT
say "$version ($commit), into $dist"

# The tools, at tools/go.mod's versions, built once into the user's cache
# (scripts/tools.sh).
tools=$(bash scripts/tools.sh)
"$GO" build -o "$work/releasecheck" ./scripts/releasecheck
syft() { SYFT_CHECK_FOR_APP_UPDATE=false SYFT_CACHE_DIR=$work/syft "$tools/syft" -q "$@"; }
cosign() { "$tools/cosign" "$@"; }
check() { "$work/releasecheck" "$@"; }

# The binaries, and their SBOMs.
ldflags="-s -w -E=proxy_supervisor_entry -X main.version=$version -X main.commit=$commit -X main.date=$date"
for p in $PLATFORMS; do
  os=${p%/*} arch=${p#*/} bin=$dist/proxy-supervisor-${p/\//-}
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch "$GO" build -trimpath -ldflags "$ldflags" -o "$bin" ./cmd/proxy-supervisor
  info=$("$GO" version -m "$bin")
  for want in "build	GOOS=$os" "build	GOARCH=$arch" "build	CGO_ENABLED=0"; do
    grep -qF -- "$want" <<<"$info" || fail "$bin: its build information lacks '$want'"
  done
  # The version -X set, not the v-prefixed module version Go stamps at a tag.
  grep -qaP -- "(?<!v)\Q$version\E" "$bin" || fail "$bin: does not hold its version $version"
  syft scan "file:$bin" -o "spdx-json=$dist/sbom/${bin##*/}.spdx.json" -o "cyclonedx-json=$dist/sbom/${bin##*/}.cdx.json"
  check sbom "$bin" "$dist/sbom/${bin##*/}.spdx.json" "$dist/sbom/${bin##*/}.cdx.json"
done
host=$dist/proxy-supervisor-linux-$("$GO" env GOARCH)
if [ -x "$host" ]; then
  got=$("$host" version)
  [[ $got == "proxy-supervisor $version (commit $commit, date $date, "* ]] || fail "$host version: $got"
fi
(cd "$dist" && sha256sum proxy-supervisor-linux-* > SHA256SUMS)
say "binaries, SHA256SUMS and their SBOMs: checked"

# The release's registry (scripts/registry.sh), or the caller's.
if [ -n "${RELEASE_REGISTRY:-}" ]; then
  reg=$RELEASE_REGISTRY
  curl -sf -o /dev/null "http://$reg/v2/" || fail "RELEASE_REGISTRY=$reg: no registry answers at http://$reg/v2/"
else
  start_registry "$tools/registry" "$dist/registry" "$work/registry.log" || fail "the registry did not start"
fi
repo=${REGISTRY#*/}

# buildah on a store of its own, in a mount namespace whose /var/lib and
# /run are its own (buildah writes a blob cache and network configuration
# there, whatever its store): nothing is left on the machine.
# /etc/resolv.conf is often a link into /run (systemd-resolved): a copy is
# bound at the file it names, inside the new /run, so that a pinned base's
# pull still resolves docker.io.
cp -L /etc/resolv.conf "$work/resolv.conf"
resolv=$(readlink -f /etc/resolv.conf)
bah() {
  TMPDIR=$work/tmp unshare --mount --propagation private sh -c '
    mount -t tmpfs -o mode=0755 tmpfs /var/lib && mount -t tmpfs -o mode=0755 tmpfs /run || exit
    case $1 in /run/* | /var/lib/*) mkdir -p "${1%/*}" && : > "$1" && mount --bind "$0" "$1" || exit ;; esac
    shift
    exec buildah "$@"' "$work/resolv.conf" "$resolv" \
    --root "$work/buildah/storage" --runroot "$work/buildah/run" --storage-driver vfs "$@"
}
# push NAME REF: pushes the manifest list NAME, every platform, and prints
# the index's digest.
push() {
  rm -f "$work/digest"
  bah manifest push -q --all --format oci --tls-verify=false --digestfile "$work/digest" "$1" "docker://$2" >/dev/null &&
    cat "$work/digest"
}

# image_of PLATFORM NAME FILE DEST [FILE DEST]...: commits NAME, an image
# of PLATFORM that holds each FILE at its DEST and nothing else.
image_of() {
  local c p=$1 name=$2
  shift 2
  c=$(bah from -q scratch)
  while [ $# -gt 0 ]; do
    bah copy -q "$c" "$1" "$2" >/dev/null
    shift 2
  done
  bah config --os "${p%/*}" --arch "${p#*/}" "$c"
  bah commit -q "$c" "$name" >/dev/null
  bah rm "$c" >/dev/null
}

# Each platform's binary as an image of that platform, which the
# Dockerfiles take as BINARY (no build stage, no emulation).
for p in $PLATFORMS; do
  image_of "$p" "localhost/release/binary:${p/\//-}" "$dist/proxy-supervisor-${p/\//-}" /out/proxy-supervisor
done

if [ "$bases" = standin ]; then
  # A stand-in for each base: an image of each platform that says what it
  # stands for, pushed as one index; its digest pins it. With
  # RELEASE_STANDIN_ENVOY=DIR the Envoy stand-in also runs: it holds
  # DIR/envoy-OS-ARCH at /usr/local/bin/envoy, where Envoy's image has envoy
  # (the real-kubelet suite gives it the fake Envoy, and runs the release).
  for b in "envoy $envoy_version" "proxyv2 $istio_version"; do
    read -r base btag <<<"$b"
    bah manifest create "localhost/standin/$base" >/dev/null
    echo "a stand-in for the $base base, made by make release: not Envoy's or Istio's image" > "$work/STAND-IN"
    for p in $PLATFORMS; do
      files=("$work/STAND-IN" /STAND-IN)
      if [ "$base" = envoy ] && [ -n "${RELEASE_STANDIN_ENVOY:-}" ]; then
        [ -x "$RELEASE_STANDIN_ENVOY/envoy-${p/\//-}" ] || fail "RELEASE_STANDIN_ENVOY: no $RELEASE_STANDIN_ENVOY/envoy-${p/\//-}"
        files+=("$RELEASE_STANDIN_ENVOY/envoy-${p/\//-}" /usr/local/bin/envoy)
      fi
      image_of "$p" "localhost/standin/$base:${p/\//-}" "${files[@]}"
      bah manifest add "localhost/standin/$base" "containers-storage:localhost/standin/$base:${p/\//-}" >/dev/null
    done
    d=$(push "localhost/standin/$base" "$reg/standin/$base:$btag")
    case $base in
    envoy) envoy_image=$reg/standin/envoy ENVOY_BASE_DIGEST=$d ;;
    proxyv2) istio_hub=$reg/standin ISTIO_BASE_DIGEST=$d ;;
    esac
  done
fi

# The images, each an index of every platform, pushed, checked, signed,
# and each platform's SBOMs attested.
COSIGN_PASSWORD=${COSIGN_PASSWORD:-}
export COSIGN_PASSWORD
if [ -n "${COSIGN_KEY:-}" ]; then
  key=$COSIGN_KEY
  cosign public-key --key "$key" > "$dist/cosign.pub"
else
  (cd "$work" && quiet "cosign generate-key-pair" cosign generate-key-pair --output-key-prefix cosign)
  key=$work/cosign.key
  cp "$work/cosign.pub" "$dist/cosign.pub"
fi
insecure=(--allow-insecure-registry --allow-http-registry)
: > "$dist/images.txt"
for img in "client images/client.Dockerfile client:$tag" \
  "envoy images/envoy.Dockerfile envoy:$tag" \
  "proxyv2 images/proxy.Dockerfile proxyv2:$istio_version-$tag"; do
  read -r name file path <<<"$img"
  ref=$reg/$repo/$path
  args=(--build-arg "VERSION=$version" --build-arg "COMMIT=$commit" --build-arg "BUILD_DATE=$date")
  case $name in
  envoy) args+=(--build-arg "ENVOY_IMAGE=$envoy_image" --build-arg "ENVOY_VERSION=$envoy_version@$ENVOY_BASE_DIGEST") ;;
  proxyv2) args+=(--build-arg "ISTIO_HUB=$istio_hub" --build-arg "ISTIO_VERSION=$istio_version@$ISTIO_BASE_DIGEST") ;;
  esac
  bah manifest create "localhost/release/$name" >/dev/null
  for p in $PLATFORMS; do
    bah bud -q --pull=false --tls-verify=false --platform "$p" --timestamp "$(date -d "$date" +%s)" \
      --build-arg "BINARY=localhost/release/binary:${p/\//-}" "${args[@]}" \
      --manifest "localhost/release/$name" -f "$file" . >/dev/null
  done
  d=$(push "localhost/release/$name" "$ref")
  case $name in
  envoy) base=$ENVOY_BASE_DIGEST ;;
  proxyv2) base=$ISTIO_BASE_DIGEST ;;
  *) base=- ;;
  esac
  check index "$reg" "$repo/${path%%:*}" "$d" "$version" "$commit" "$base" $PLATFORMS > "$work/platforms"
  quiet "cosign sign $ref@$d" cosign sign -y --recursive --key "$key" --use-signing-config=false --tlog-upload=false "${insecure[@]}" "$ref@$d"
  while read -r p pd; do
    sbom=$dist/sbom/$name-${p/\//-}
    SYFT_REGISTRY_INSECURE_USE_HTTP=true syft scan --platform "$p" "registry:$ref@$pd" \
      -o "spdx-json=$sbom.spdx.json" -o "cyclonedx-json=$sbom.cdx.json"
    check sbom "$dist/proxy-supervisor-${p/\//-}" "$sbom.spdx.json" "$sbom.cdx.json"
    # On the platform's image, and on the index, which a pod's image
    # reference resolves to: an admission check finds them on either.
    for t in "spdxjson $sbom.spdx.json" "cyclonedx $sbom.cdx.json"; do
      read -r type predicate <<<"$t"
      for at in "$pd" "$d"; do
        quiet "cosign attest --type $type $ref@$at" cosign attest -y --key "$key" --use-signing-config=false --tlog-upload=false "${insecure[@]}" --type "$type" --predicate "$predicate" "$ref@$at"
      done
    done
  done < "$work/platforms"
  # Verified as a user's admission check would: the signature of the index
  # and of each platform's image, and each SBOM attestation.
  quiet "cosign verify $ref@$d" cosign verify --key "$dist/cosign.pub" --insecure-ignore-tlog=true "${insecure[@]}" "$ref@$d"
  for t in spdxjson cyclonedx; do
    quiet "cosign verify-attestation --type $t $ref@$d" cosign verify-attestation --key "$dist/cosign.pub" --insecure-ignore-tlog=true "${insecure[@]}" --type "$t" "$ref@$d"
  done
  while read -r p pd; do
    quiet "cosign verify $ref@$pd ($p)" cosign verify --key "$dist/cosign.pub" --insecure-ignore-tlog=true "${insecure[@]}" "$ref@$pd"
    for t in spdxjson cyclonedx; do
      quiet "cosign verify-attestation --type $t $ref@$pd ($p)" cosign verify-attestation --key "$dist/cosign.pub" --insecure-ignore-tlog=true "${insecure[@]}" --type "$t" "$ref@$pd"
    done
  done < "$work/platforms"
  line="$REGISTRY/$path@$d"
  [ "$bases" = standin ] && [ "$name" != client ] && line="$line (built on a stand-in base)"
  echo "$line" >> "$dist/images.txt"
  say "$REGISTRY/$path@$d: $(wc -l < "$work/platforms") platforms, signed, SBOMs attested, verified"
done

# The chart (charts/proxy-supervisor), an OCI artifact in the same
# registry: packaged at the release's version, its default image the
# release's envoy image (appVersion is the images' tag), pushed, signed and
# verified as the images are, then pulled back by digest as helm install
# would and rendered. helm is deploytest's tool (deploytest/go.mod).
helm_bin=$("$GO" -C deploytest tool -n helm)
helm() { HELM_CACHE_HOME=$work/helm/cache HELM_CONFIG_HOME=$work/helm/config HELM_DATA_HOME=$work/helm/data "$helm_bin" "$@"; }
quiet "helm package" helm package charts/proxy-supervisor --version "$version" --app-version "$tag" -d "$work/chart"
pkg=$(echo "$work"/chart/proxy-supervisor-*.tgz)
[ -f "$pkg" ] || fail "helm package made no chart archive"
cp "$pkg" "$dist/"
ref=$reg/$repo/charts/proxy-supervisor
quiet "helm push" helm push "$pkg" "oci://$reg/$repo/charts" --plain-http
d=$(sed -n 's/^Digest: //p' "$work/out")
[[ $d == sha256:* ]] || fail "helm push printed no digest: $(tail -n 3 "$work/out")"
quiet "cosign sign $ref@$d" cosign sign -y --key "$key" --use-signing-config=false --tlog-upload=false "${insecure[@]}" "$ref@$d"
quiet "cosign verify $ref@$d" cosign verify --key "$dist/cosign.pub" --insecure-ignore-tlog=true "${insecure[@]}" "$ref@$d"
mkdir -p "$work/pulled"
quiet "helm pull $ref@$d" helm pull "oci://$ref@$d" --plain-http -d "$work/pulled"
pulled=$(echo "$work"/pulled/*.tgz)
cmp -s "$pkg" "$pulled" || fail "the chart pulled by digest is not the one pushed"
helm template proxy-supervisor "$pulled" --kube-version 1.37.2 > "$work/chart.yaml" 2> "$work/out" ||
  fail "the pulled chart does not render: $(tail -n 3 "$work/out")"
grep -qF "'$REGISTRY/envoy:$tag'" "$work/chart.yaml" || fail "the chart's default image is not $REGISTRY/envoy:$tag"
echo "$REGISTRY/charts/proxy-supervisor:$tag@$d" > "$dist/charts.txt"
say "$REGISTRY/charts/proxy-supervisor@$d: the chart, signed, verified, pulled back by digest and rendered"

stop_registry
rm -rf "$work"
say "done: $dist"
