#!/usr/bin/env bash
# RssAnon of a ready supervisor (fake Envoy) probed every second, at 5, 30,
# 60 and 120 s after its start; then one 5 s wrk burst on /healthz/ready
# with GODEBUG=gctrace=1, counting the collections it ran. Run as root:
#   unshare -n bash scripts/memory-over-time.sh bin   (after make build)
set -euo pipefail
bin=${1:?bin dir with proxy-supervisor and fake-envoy}
ip link set lo up
d=$(mktemp -d)
trap 'kill $sup 2>/dev/null; wait $sup 2>/dev/null; rm -rf "$d"' EXIT
GODEBUG=gctrace=1 "$bin/proxy-supervisor" supervise --control-dir "$d" --health-addr 127.0.0.1:15022 -- "$bin/fake-envoy" 2>"$d.err" >/dev/null &
sup=$!
start=$(date +%s)
(while sleep 1; do curl -s -o /dev/null http://127.0.0.1:15022/healthz/ready; done) & prober=$!
for at in 5 30 60 120; do
  while [ $(( $(date +%s) - start )) -lt $at ]; do sleep 0.2; done
  echo "at ${at}s: $(grep -E 'RssAnon' /proc/$sup/status | tr -s ' ')"
done
kill $prober
before=$(grep -c '^gc ' "$d.err" || true)
wrk -t2 -c16 -d5s http://127.0.0.1:15022/healthz/ready | grep -E 'Requests/sec'
after=$(grep -c '^gc ' "$d.err" || true)
echo "collections during the 5 s burst: $((after - before)) (before it, since the start: $before)"
rm -f "$d.err"
