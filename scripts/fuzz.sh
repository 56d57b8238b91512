#!/usr/bin/env bash
# Runs every fuzz target of the repository's modules for a short fixed time, one after the
# other, so that CI fuzzes each on every run: `make fuzz` (FUZZTIME=3s each
# by default). The seed corpus is each package's testdata/fuzz/FuzzName/ plus
# its f.Add calls; a failing input is written there by `go test` and must be
# committed with its fix, so that the plain `go test` keeps replaying it.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-3s}
export CGO_ENABLED=${CGO_ENABLED:-0}

# package dir and target name of every `func FuzzX(f *testing.F)`
mapfile -t targets < <(grep -rn --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]+\(f \*testing\.F\)' . \
  | sed -E 's#^\./(.*)/[^/]+_test\.go:[0-9]+:func (Fuzz[A-Za-z0-9_]+).*#\1 \2#' | sort)
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz: no fuzz targets found" >&2
  exit 1
fi
start=$(date +%s)
failed=0
# coordinatorRace: Go's fuzz coordinator (before Go 1.27, golang/go#75804) may end
# a duration-bound run with a bare "context deadline exceeded" as -fuzztime
# expires, with no failing input found or written. That run says nothing about
# the target, so it is run again (twice at most); a real failure writes its input
# under testdata/fuzz and says so, and fails at once.
coordinatorRace() {
  grep -qx '    context deadline exceeded' <<<"$1" && ! grep -q 'Failing input written to' <<<"$1"
}
# moduleOf is the directory of the module that holds package dir $1 (the
# nearest go.mod above it: e2e/ is a module of its own).
moduleOf() {
  local d=$1
  until [ -f "$d/go.mod" ]; do d=$(dirname "$d"); done
  echo "$d"
}
for t in "${targets[@]}"; do
  read -r dir name <<<"$t"
  mod=$(moduleOf "$dir")
  rel=${dir#"$mod"}
  for try in 1 2 3; do
    # -parallel 2: the machine's cores; a bounded -timeout covers a hung target.
    if out=$(go -C "$mod" test -count=1 -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" -parallel 2 -timeout 2m "./${rel#/}" 2>&1); then
      status=ok
      break
    fi
    status=FAIL
    coordinatorRace "$out" || break
    echo "fuzz: again ./$dir $name: Go's fuzz coordinator ended the run with a bare 'context deadline exceeded' and no failing input (golang/go#75804)"
  done
  if [ "$status" = ok ]; then
    echo "fuzz: ok   ./$dir $name ($(grep -oE 'execs: [0-9]+' <<<"$out" | tail -1 || echo 'execs: ?'))"
  else
    failed=1
    echo "fuzz: FAIL ./$dir $name"
    echo "$out"
  fi
done
echo "fuzz: ${#targets[@]} targets, ${FUZZTIME} each, $(( $(date +%s) - start )) s in all"
exit $failed
