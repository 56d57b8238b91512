#!/usr/bin/env bash
# flakes.sh [-n RUNS] [--stress] [-o DIR] [--] GO-TEST-ARGS...
#
# Runs `go test -json -count=1 GO-TEST-ARGS...` RUNS times (default 4) in
# the current directory, one run after the other, and prints each test's
# pass rate over the runs and every failure's first lines (scripts/flakes).
# A test that passes in some runs and fails in others is a flake.
#
# --stress runs Debian's `stress-ng --cpu 2` beside every run, a busy node:
# the suites must hold on one. stress-ng is stopped when the script ends,
# however it ends, and it also ends by itself 4 hours after it started. A
# TERM to the script takes effect once the run under way ends (so that a
# suite's own cleanup is never cut short); ^C stops go test at once.
# -o keeps each run's go test -json output in DIR (run-1.json, ...); by
# default they go to a temporary directory that is removed.
#
#   cd e2e && ../scripts/flakes.sh -n 4 --stress -- -run 'TestWait' .
#   cd kubelettest && CI=true ../scripts/flakes.sh -n 2 -- -run 'TestPodFigures' -timeout 40m ./...
#
# It exits 1 when any run failed, 2 on bad usage.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
runs=4 stress=false keep=""
usage() { sed -n '2,3p' "$0" | sed 's/^# //' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    -n) [ $# -ge 2 ] || usage; runs=$2; shift 2 ;;
    --stress) stress=true; shift ;;
    -o) [ $# -ge 2 ] || usage; keep=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) usage ;;
    *) break ;;
  esac
done
case $runs in ''|*[!0-9]*|0) echo "flakes.sh: -n wants a number of runs from 1, got '$runs'" >&2; exit 2 ;; esac
[ $# -gt 0 ] || { echo "flakes.sh: no go test arguments (packages, -run ...)" >&2; exit 2; }

tmp=$(mktemp -d)
stress_pid=""
cleanup() {
  if [ -n "$stress_pid" ]; then
    # stress-ng leads its own process group (setsid): its workers go with it.
    kill -TERM -- "-$stress_pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 -- "-$stress_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$stress_pid" 2>/dev/null
    wait "$stress_pid" 2>/dev/null
    stress_pid=""
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

GO=${GO:-go}
$GO build -C "$root" -o "$tmp/flakes" ./scripts/flakes || exit 2
out=$tmp
if [ -n "$keep" ]; then
  mkdir -p "$keep" || exit 2
  out=$keep
fi

if $stress; then
  command -v stress-ng >/dev/null || { echo "flakes.sh: --stress needs stress-ng (Debian: apt-get install stress-ng)" >&2; exit 2; }
  setsid stress-ng --cpu 2 --timeout 4h --quiet >"$tmp/stress-ng.log" 2>&1 &
  stress_pid=$!
  echo "flakes.sh: stress-ng --cpu 2 beside the runs (pid $stress_pid)"
fi
# stressed says whether stress-ng still runs, for each run's line.
stressed() {
  [ -z "$stress_pid" ] && return
  kill -0 "$stress_pid" 2>/dev/null && echo ", stress-ng running" && return
  echo ", stress-ng ENDED: $(head -c 300 "$tmp/stress-ng.log")"
}

files=()
for i in $(seq "$runs"); do
  f=$out/run-$i.json
  start=$(date +%s)
  $GO test -json -count=1 "$@" >"$f" 2>"$out/run-$i.stderr"
  code=$?
  echo "flakes.sh: run $i of $runs: go test exited $code after $(( $(date +%s) - start ))s (load $(cut -d' ' -f1-3 /proc/loadavg)$(stressed))"
  # go test's own complaints (bad flags, a package that does not build
  # under -json's radar) are on its stderr.
  if [ "$code" -ne 0 ] && [ -s "$out/run-$i.stderr" ]; then sed -n '1,5s/^/    /p' "$out/run-$i.stderr"; fi
  files+=("$f")
done
echo
"$tmp/flakes" "${files[@]}"
