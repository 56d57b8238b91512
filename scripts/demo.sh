#!/usr/bin/env bash
# A local run of the pod lifecycle against the fake Envoy: the processes a
# kubelet would start in a pod, started by hand on this machine's loopback.
set -euo pipefail
BIN=${BIN:-bin}
ps=$BIN/proxy-supervisor
envoy=$BIN/fake-envoy
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# Ports away from Istio's, so the demo runs beside anything else here. Only
# the stand-in app's port counts as the app's (--app-ports): this machine's
# own listeners are not part of the pod.
ADMIN=127.0.0.1:19000 HEALTH=127.0.0.1:19022 APP=127.0.0.1:18080
supervise() { # DIR FLAGS... : the proxy container
  local dir=$1; shift
  "$ps" supervise --control-dir "$dir" --admin-url "http://$ADMIN" --health-addr "$HEALTH" \
    --app-ports 18080 "$@" -- "$envoy" --admin-addr "$ADMIN" --init-delay 300ms \
    --listener "virtualInbound=127.0.0.1:19006,inbound" --log-level warning &
  pids+=($!)
  sup=$!
}
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1. A Job succeeds: the app waits for the proxy, runs, reports; the proxy stops with the app's code"
supervise "$work/job1"
"$ps" exec --control-dir "$work/job1" --name app -- sh -c 'echo "[app] proxy is ready; running the job"; sleep 1; echo "[app] done"'
wait "$sup" && code=0 || code=$?
echo "[pod] proxy container exited $code; the Job's pod completes"

step "2. A Job fails under restartPolicy Never: its code 3 ends the proxy too"
supervise "$work/job2"
"$ps" exec --control-dir "$work/job2" --name app -- sh -c 'echo "[app] failing"; exit 3' || echo "[app] exited $?"
wait "$sup" && code=0 || code=$?
echo "[pod] proxy container exited $code"

step "3. The app finished before the proxy container started: the record survives"
mkdir -p "$work/job3"
supervise "$work/job3"  # creates peers/; killed at once, as if the container restarted
sleep 0.3; kill -KILL "$sup"; wait "$sup" 2>/dev/null || true
"$ps" complete --control-dir "$work/job3" --name app --exit-code 0
supervise "$work/job3"
wait "$sup" && code=0 || code=$?
echo "[pod] proxy container exited $code without starting the proxy"

step "4. Pod deletion: preStop blocks while the app still listens, then the proxy stops"
supervise "$work/web" --drain-min 1s --drain-timeout 20s
"$ps" wait --control-dir "$work/web" --timeout 10s && echo "[hook] postStart wait: proxy ready"
# A stand-in app listening on 18080 (the fake Envoy binary, as a plain TCP server).
"$envoy" --admin-addr 127.0.0.1:18000 --listener "app=$APP,tcp" --log-level warning &
app=$!; pids+=($app)
sleep 0.5
"$ps" prestop --control-dir "$work/web" --timeout 20s && echo "[hook] preStop returned: drained" &
hook=$!
sleep 2
echo "[pod] status during the drain:"
"$ps" status --control-dir "$work/web" | sed 's/^/    /'
echo "[app] SIGTERM: the app closes its port"
kill -TERM "$app"
wait "$hook" || true
kill -TERM "$sup"
wait "$sup" && code=0 || code=$?
echo "[pod] proxy container exited $code"
