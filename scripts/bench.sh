#!/usr/bin/env bash
# The benchmarks of docs/benchmarks.md, end to end: installs the Debian tools
# they need, builds, runs them all and prints a summary. Needs root (PID and
# network namespaces) and takes about 12 minutes on a 2-core VM. Everything
# runs on loopback, in namespaces it creates, with bounded loops.
#
#   make bench                       # or: bash scripts/bench.sh
#   PS_BENCH_QUICK=1 make bench      # a tenth of the samples, a smoke run
#   PS_BENCH_DIRTY=1 make bench      # measure uncommitted changes anyway
#
# Raw output goes to $BIN/bench/ (e2e.txt, kubelet.txt, storm-hyperfine.md,
# portwatch.txt, summary.txt, load.txt), and the binaries measured to $BIN/bench/bin/. At the
# end it rewrites the current run in docs/benchmarks.md and
# docs/benchmarks.svg from that output (benchreport/). The report is of a
# commit: a tree with uncommitted changes to tracked files is refused, or,
# under PS_BENCH_DIRTY=1, measured and marked as not a commit's. pilot-agent,
# a peer baseline, is built once per istio version by scripts/pilot-agent.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
mkdir -p "$BIN"
BIN=$(cd "$BIN" && pwd)
OUT=$BIN/bench
mkdir -p "$OUT"
# The binaries choose their own runtime tuning; a caller's must not leak in.
unset GOMAXPROCS GOMEMLIMIT GOGC GODEBUG

if [ "$(id -u)" -ne 0 ]; then
  echo "bench: needs root for PID and network namespaces" >&2
  exit 1
fi

# The current report is a commit's: what it measured must be what the
# commit holds. (A quick run is a smoke run, whatever the tree.)
if [ -z "${PS_BENCH_DIRTY:-}${PS_BENCH_QUICK:-}" ] && ! git diff --quiet HEAD --; then
  echo "bench: the tree has uncommitted changes, and docs/benchmarks.md reports a commit:" >&2
  git diff --stat HEAD -- | tail -1 >&2
  echo "bench: commit them, or set PS_BENCH_DIRTY=1 to measure them anyway (the report then says so)" >&2
  exit 1
fi

# --- tools ---------------------------------------------------------------
declare -A pkg_of=([tini]=tini [dumb-init]=dumb-init [wrk]=wrk [hyperfine]=hyperfine
  [netstat]=net-tools [curl]=curl [perl]=perl-base [unshare]=util-linux
  [nsenter]=util-linux [ip]=iproute2)
missing=()
for tool in "${!pkg_of[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("${pkg_of[$tool]}")
done
if [ ${#missing[@]} -gt 0 ]; then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  echo "== installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# --- build ---------------------------------------------------------------
# Into a directory of the run's own, so that a `make build` elsewhere during
# the run cannot swap the binaries under it.
echo "== build"
RUNBIN=$OUT/bin
make --no-print-directory build BIN="$RUNBIN"
CGO_ENABLED=0 go build -trimpath -o "$RUNBIN/storm" ./scripts/storm
CGO_ENABLED=0 go build -trimpath -o "$RUNBIN/scuttle" ./scripts/scuttle

# pilot-agent, the baseline of `wait` and `complete`, built once per
# istio.io/istio version into the user's cache (scripts/pilot-agent.sh, which
# the real-kubelet suite uses too).
if agent=$(bash scripts/pilot-agent.sh); then
  cp "$agent" "$RUNBIN/pilot-agent"
else
  echo "bench: warning: pilot-agent did not build; its baselines are left out" >&2
fi

machine() {
  local changes
  changes=$(git diff --shortstat HEAD 2>/dev/null | sed 's/^ *//')
  echo "measured: $("$RUNBIN/proxy-supervisor" version) (${changes:-no uncommitted changes to tracked files}); $(date -u +%Y-%m-%dT%H:%MZ); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "kernel $(uname -r), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(free -m | awk '/^Mem:/ {print $2}') MiB RAM"
  echo "peers: pilot-agent from istio.io/istio $(awk '$1 == "istio.io/istio" {print $2; exit}' deploytest/istioinject/go.mod), scuttle's pattern from scripts/scuttle"
  echo "$(go version); tini $(tini --version 2>&1 | awk '{print $3}'); dumb-init $(dumb-init --version 2>&1 | awk '{print $2}'); $(hyperfine --version); wrk $(wrk -v 2>&1 | awk 'NR==1 {print $2}')"
}
machine | tee "$OUT/machine.txt"
if awk '{exit !($1 > 1.0)}' /proc/loadavg; then
  echo "bench: warning: the machine is busy (load $(cut -d' ' -f1 /proc/loadavg)); latencies will be noisy" | tee -a "$OUT/machine.txt"
fi

# The 1-minute load average every 5 s: a run that another job shared shows here.
(while sleep 5; do cut -d' ' -f1 /proc/loadavg; done) >"$OUT/load.txt" &
sampler=$!
trap 'kill "$sampler" 2>/dev/null || true' EXIT

# --- 1-6: the pod-sandbox benchmarks (e2e/bench_test.go) ------------------
echo "== e2e benchmarks (idle memory, orphan storm, readiness, /healthz/ready, completion, drain, exec, drain CPU, memory after a burst)"
status=0
(cd e2e && PS_BENCH_BIN="$RUNBIN" go test -count=1 -run '^$' -bench . -benchtime 1x -timeout 25m .) \
  | tee "$OUT/e2e.txt" || status=1

# --- 2, whole-command view: hyperfine over the same storm ------------------
echo "== orphan storm, whole command (hyperfine)"
ctl=$(mktemp -d)
trap 'rm -rf "$ctl"; kill "$sampler" 2>/dev/null || true' EXIT
storm="$RUNBIN/storm -n 5000"
runs=10
[ -n "${PS_BENCH_QUICK:-}" ] && runs=3
hyperfine -N --warmup 2 --runs "$runs" --export-markdown "$OUT/storm-hyperfine.md" \
  -n tini "unshare --pid --fork --mount-proc tini -- $storm" \
  -n dumb-init "unshare --pid --fork --mount-proc dumb-init $storm" \
  -n proxy-supervisor "unshare --pid --fork --mount-proc $RUNBIN/proxy-supervisor supervise --health-addr '' --admin-url http://127.0.0.1:9 --control-dir $ctl -- $storm" \
  | tee "$OUT/storm-hyperfine.txt"

# --- 7: port-scan cost ----------------------------------------------------
echo "== port scan: netlink vs /proc/net/tcp"
go test -count=1 -run '^$' -bench Scan -benchtime 200x ./internal/portwatch/ | tee "$OUT/portwatch.txt" || status=1

# --- 8: pod-level figures in a real kubelet (kubelettest/) ----------------
# Containerd, runc and a kubelet built into the user's cache (minutes when
# cold), in namespaces of their own; the suite skips, saying why, where the
# machine lacks them.
echo "== pod-level figures in a real kubelet (proxy ready → app started, app exit → proxy exit, → phase, deletion → gone)"
podruns=5
[ -n "${PS_BENCH_QUICK:-}" ] && podruns=1
(cd kubelettest && KUBELETTEST_FIGURE_RUNS=$podruns go test -count=1 -run '^TestPodFigures$' -v -timeout 40m .) \
  | tee "$OUT/kubelet.txt" || status=1

# --- summary --------------------------------------------------------------
{
  echo
  echo "================ summary ================"
  cat "$OUT/machine.txt"
  echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg); highest 1-minute load seen during the run: $(sort -g "$OUT/load.txt" | tail -1)"
  echo
  echo "-- targets"
  awk -F'\t' '/^TARGET/ {printf "  %-7s %-16s %-86s %-34s (target %s)\n", $6, $2, $3, $4, $5}' "$OUT/e2e.txt"
  echo
  echo "-- idle memory, medians (kB)"
  awk -F'\t' '/^MEM/ {printf "  %-58s %s %s %s %s\n", $2, $3, $4, $5, $6}' "$OUT/e2e.txt"
  echo
  echo "-- latencies (ms)"
  awk -F'\t' '/^ROW/ {printf "  %-50s %-88s %s %s %s %s %s\n", $2, $3, $4, $5, $6, $7, $8}' "$OUT/e2e.txt" "$OUT/kubelet.txt"
  awk -F'\t' '/^NOTE/ {printf "  note: %s: %s\n", $2, $3}' "$OUT/e2e.txt"
  echo
  echo "-- CPU (ms per second)"
  awk -F'\t' '/^CPU/ {printf "  %-50s %s %s %s %s\n", $3, $4, $5, $6, $7}' "$OUT/e2e.txt"
  echo
  echo "-- memory after a 5 s wrk burst (kB)"
  awk -F'\t' '/^BURST/ {printf "  %-24s %s %s %s %s\n", $2, $3, $4, $5, $6}' "$OUT/e2e.txt"
  echo
  echo "-- orphan storm, whole command (hyperfine: each command's runs in one block, so drift lands on the later ones; the target is judged on the interleaved runs above)"
  cat "$OUT/storm-hyperfine.md"
  echo
  echo "-- port scan (ns per scan)"
  awk '/^BenchmarkScan/ {printf "  %-45s %s ns/op\n", $1, $3}' "$OUT/portwatch.txt"
} | tee "$OUT/summary.txt"

# --- report ---------------------------------------------------------------
# The generated part of docs/benchmarks.md and its chart, by benchreport/ (a
# module of its own: the plotting library stays out of the binary's).
cut -d' ' -f1-3 /proc/loadavg >"$OUT/load-end.txt"
echo "== docs/benchmarks.md (the current run) and docs/benchmarks.svg"
(cd benchreport && go run . -in "$OUT" -doc ../docs/benchmarks.md -svg ../docs/benchmarks.svg) || status=1

if [ "$status" -ne 0 ]; then
  echo "bench: a benchmark failed; see $OUT" >&2
  exit 1
fi
