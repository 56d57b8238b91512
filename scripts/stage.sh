#!/usr/bin/env bash
# stage.sh NAME COMMAND...: runs one stage of `make test`, between a line
# that names it and one that says how it ended and how long it took, so
# that CI's log reads as a list of stages.
set -uo pipefail
name=$1; shift
printf '\n=== stage: %s\n' "$name"
start=$(date +%s.%N)
"$@"
code=$?
took=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { s = b - a; if (s < 60) printf "%.1fs", s; else printf "%dm%02ds", s / 60, s % 60 }')
if [ "$code" -eq 0 ]; then
  printf '=== stage: %s: ok in %s\n' "$name" "$took"
else
  printf '=== stage: %s: FAILED (exit %d) after %s\n' "$name" "$code" "$took"
fi
exit "$code"
