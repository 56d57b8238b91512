#!/usr/bin/env bash
# background.sh: a job that make test runs beside its stages, for a cold
# build that shares nothing with them (the kubelet and the control plane):
#
#   bash scripts/background.sh start NAME OWNER COMMAND...
#   bash scripts/background.sh nice NAME OWNER N
#   bash scripts/background.sh wait NAME OWNER
#
# start runs COMMAND in a session of its own, its output in a log file
# (bin/background/NAME-OWNER.log), at niceness BACKGROUND_NICE (19 by
# default). OWNER is the pid of the make that runs the stages ($$PPID in
# its recipe): when that make ends before wait (a stage failed, or it was
# interrupted), the job is stopped with it.
#
# nice sets the job's niceness to N. make test starts the builds at 0,
# beside the stages that compile too (their order does not matter, and
# beside a CPU hog at niceness 0 more builders at 0 take more of the
# cores), then lowers them to 19 before the stages whose tests time
# processes: from then on they take the CPU the tests leave idle (the pod
# tests mostly wait) and little of what they use. At 19 beside a hog at 0
# they take almost nothing (the scheduler's weights are 15 and 1024), which
# is why they do not start at 19.
#
# wait raises the job to niceness 0 (it is what the next stage needs now:
# where that is not allowed, it goes on as it is), waits for its end and
# says how long it ran and how long it was waited for. When it failed, its
# log is printed and wait exits with its status, so that make test fails.
set -uo pipefail
cmd=${1:-}
name=${2:-}
owner=${3:-}
if [ -z "$cmd" ] || [ -z "$name" ] || [ -z "$owner" ]; then
  echo "usage: background.sh start NAME OWNER COMMAND... | nice NAME OWNER N | wait NAME OWNER" >&2
  exit 2
fi
shift 3
dir=${BACKGROUND_DIR:-$(cd "$(dirname "$0")/.." && pwd)/bin/background}
base=$dir/$name-$owner
took() {
  awk -v s="$1" 'BEGIN { if (s < 60) printf "%ds", s; else printf "%dm%02ds", s / 60, s % 60 }'
}
case $cmd in
nice)
  pgid=$(cat "$base.pgid" 2>/dev/null)
  if [ ! -e "$base.rc" ] && [ -n "$pgid" ]; then
    renice -n "${1:?usage: background.sh nice NAME OWNER N}" -g "$pgid" >/dev/null 2>&1 &&
      echo "=== background: $name: niceness $1"
  fi
  exit 0
  ;;
start)
  mkdir -p "$dir" || exit 1
  rm -f "$base.rc" "$base.pgid" "$base.log"
  date +%s >"$base.start"
  # setsid: the job leads a process group of its own, which wait renices and
  # the watcher stops whole (go, the test binary, go build, the compilers).
  setsid nice -n "${BACKGROUND_NICE:-19}" bash -c '
    echo $$ >"$0.pgid"
    "$@"
    echo $? >"$0.rc.tmp" && mv "$0.rc.tmp" "$0.rc"
  ' "$base" "$@" </dev/null >"$base.log" 2>&1 &
  # The watcher: the job never outlives the make that started it. It
  # outlives an interrupt of make's process group (the job, in a session of
  # its own, gets none), to stop the job then.
  (
    trap '' INT TERM HUP
    while kill -0 "$owner" 2>/dev/null && [ ! -e "$base.rc" ]; do sleep 2; done
    if [ ! -e "$base.rc" ] && pgid=$(cat "$base.pgid" 2>/dev/null); then
      kill -TERM -- "-$pgid" 2>/dev/null
      sleep 5
      kill -KILL -- "-$pgid" 2>/dev/null
      rm -f "$base.pgid" "$base.start"
    fi
  ) </dev/null >/dev/null 2>&1 &
  echo "=== background: $name: started, niceness ${BACKGROUND_NICE:-19}, log $base.log"
  ;;
wait)
  if [ ! -e "$base.start" ]; then
    echo "=== background: $name: no such job was started ($base.start)" >&2
    exit 1
  fi
  start=$(cat "$base.start")
  waited=$(date +%s)
  for _ in 1 2 3 4 5; do [ -e "$base.pgid" ] && break; sleep 1; done
  pgid=$(cat "$base.pgid" 2>/dev/null)
  if [ ! -e "$base.rc" ] && [ -n "$pgid" ]; then
    renice -n 0 -g "$pgid" >/dev/null 2>&1
  fi
  while [ ! -e "$base.rc" ]; do
    if [ -z "$pgid" ] || ! kill -0 -- "-$pgid" 2>/dev/null; then
      sleep 1 # it may have just written its status
      [ -e "$base.rc" ] && break
      echo "=== background: $name: ended without an exit status; its log ($base.log):"
      cat "$base.log"
      exit 1
    fi
    sleep 1
  done
  now=$(date +%s)
  rc=$(cat "$base.rc")
  ran="ran $(took $((now - start))), waited for $(took $((now - waited)))"
  rm -f "$base.rc" "$base.pgid" "$base.start"
  if [ "$rc" = 0 ]; then
    # Its few lines (what it built, and how long that took) belong in the
    # stage's output too.
    sed 's/^/    /' "$base.log"
    rm -f "$base.log"
    echo "=== background: $name: ok, $ran"
    exit 0
  fi
  echo "=== background: $name: FAILED (exit $rc), $ran; its log ($base.log):"
  cat "$base.log"
  exit "$rc"
  ;;
*)
  echo "background.sh: unknown command $cmd (start, nice or wait)" >&2
  exit 2
  ;;
esac
