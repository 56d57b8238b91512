#!/usr/bin/env bash
# A local run of the pod lifecycle against the fake Envoy: the processes a
# kubelet would start in a pod, started by hand on this machine's loopback.
# `make demo` builds the binaries and runs it; it needs no root.
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

# Fixed loopback ports away from Istio's, so the demo runs beside anything
# else here: the fake Envoy's admin API, the supervisor's health server,
# Envoy's inbound listener, the stand-in app's port and its admin port. Only
# the stand-in app's port counts as the app's (--app-ports): this machine's
# own listeners are not part of the pod.
ADMIN=127.0.0.1:19000 HEALTH=127.0.0.1:19022 INBOUND=127.0.0.1:19006 APP=127.0.0.1:18080 APP_ADMIN=127.0.0.1:18000
for a in $ADMIN $HEALTH $INBOUND $APP $APP_ADMIN; do
  if (exec 3<>"/dev/tcp/${a%:*}/${a#*:}") 2>/dev/null; then
    echo "demo: $a is in use; the demo needs 127.0.0.1 ports 19000, 19022, 19006, 18080 and 18000 free" >&2
    exit 1
  fi
done

if [ -t 1 ]; then bold=$'\033[1m' dim=$'\033[2m' off=$'\033[0m'; else bold='' dim='' off=''; fi
step() { printf '\n%s== %s%s\n' "$bold" "$*" "$off"; }
# say narrates: what a step shows, and why a line that looks odd is expected.
say() { printf '%s   # %s%s\n' "$dim" "$*" "$off"; }

# until CMD...: what a kubelet's probe does, CMD every 50 ms until it
# succeeds, for 10 s at most.
until_ok() {
  local i
  for ((i = 0; i < 200; i++)); do "$@" 2>/dev/null && return 0; sleep 0.05; done
  echo "demo: gave up after 10s waiting for: $*" >&2
  return 1
}
listening() { (exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null; }
# healthz ADDR: the status line of GET /healthz/ready.
healthz() {
  local line
  exec 3<>"/dev/tcp/${1%:*}/${1#*:}" || return 1
  printf 'GET /healthz/ready HTTP/1.1\r\nHost: demo\r\nConnection: close\r\n\r\n' >&3
  IFS= read -r line <&3 || true
  exec 3<&-
  echo "${line%$'\r'}"
}
unready() { [[ $(healthz "$1") == *" 503 "* ]]; }

supervise() { # DIR FLAGS... : the proxy container
  local dir=$1; shift
  # The kubelet creates the container's termination message file; the
  # supervisor only writes it.
  mkdir -p "$dir" && : >"$dir/termination-log"
  "$ps" supervise --control-dir "$dir" --admin-url "http://$ADMIN" --health-addr "$HEALTH" \
    --termination-log "$dir/termination-log" \
    --app-ports "${APP#*:}" "$@" -- "$envoy" --admin-addr "$ADMIN" --init-delay 300ms \
    --listener "virtualInbound=$INBOUND,inbound" --log-level warning &
  pids+=($!)
  sup=$!
}

cat <<EOF
Each scenario starts what a kubelet would start in one pod, as plain processes on
127.0.0.1: the proxy container (proxy-supervisor supervise -- fake-envoy) and the app
container. Lines that start with time= are the supervisor's log; lines that start with
proxy-supervisor: are its client commands (exec, complete, prestop); [pod], [app] and
[hook] lines are this script, playing the kubelet and the app; # lines explain. The
supervisor's log is written by a goroutine of its own, so that a full pipe never blocks
it: a log line may come a moment after what it caused.
EOF

step "1. A Job succeeds: the app waits for the proxy, runs, reports; the proxy stops with the app's code"
say "The app container runs: proxy-supervisor exec --name app -- JOB. exec waits until the"
say "supervisor says the proxy is ready, runs JOB, records its exit code in the shared volume"
say "(peers/) and tells the supervisor, which stops the proxy and exits with that code."
supervise "$work/job1"
"$ps" exec --control-dir "$work/job1" --name app -- sh -c 'echo "[app] proxy is ready; running the job"; sleep 1; echo "[app] done"'
wait "$sup" && code=0 || code=$?
say "When exec's last line says the supervisor has already read the record and stopped:"
say "expected. The supervisor watches peers/ and often stops before exec's own message"
say "reaches its socket; the record is what counts."
echo "[pod] proxy container exited $code; the Job's pod completes"
echo "[pod] its termination message: $(cat "$work/job1/termination-log")"
say "The supervisor's last act is that one line in the container's termination message"
say "(/dev/termination-log in a pod), so kubectl describe pod says why the proxy ended."

step "2. A Job fails under restartPolicy Never: its code 3 ends the proxy too"
say "The same pod, but JOB exits 3: exec exits 3, and so does the proxy container, so the"
say "pod is Failed and the Job's controller sees the failure."
supervise "$work/job2"
"$ps" exec --control-dir "$work/job2" --name app -- sh -c 'echo "[app] failing with exit code 3, on purpose"; exit 3' || echo "[app] exec exited $?"
wait "$sup" && code=0 || code=$?
say "\"proxy exited ... code=0 exit_code=3\": code is Envoy's own exit, 0 since it was asked to"
say "stop; exit_code is the supervisor's, the app's 3."
echo "[pod] proxy container exited $code"

step "3. The app finished while no supervisor ran: the record survives, and the next supervisor exits at once"
say "A first supervisor starts (it creates peers/ in the shared volume) and is killed with"
say "SIGKILL once its proxy is ready, as a crash or a node's restart would: its lines stop"
say "there, with no exit line. The app then reports with proxy-supervisor complete; no"
say "supervisor listens, which its line says: expected, the record is on disk."
mkdir -p "$work/job3"
supervise "$work/job3"
"$ps" wait --control-dir "$work/job3" --timeout 10s
kill -KILL "$sup"; wait "$sup" 2>/dev/null || true
echo "[pod] the first proxy container was killed (SIGKILL)"
"$ps" complete --control-dir "$work/job3" --name app --exit-code 0
say "The kubelet restarts the proxy container: the new supervisor reads the record at its"
say "start, finds the Job done, and exits 0 without starting the proxy."
supervise "$work/job3"
wait "$sup" && code=0 || code=$?
echo "[pod] the restarted proxy container exited $code without starting the proxy"

step "4. Pod deletion: preStop blocks while the app still listens, then the proxy stops"
say "A Deployment's pod. The app is a stand-in TCP server on $APP (the fake-envoy"
say "binary serving one plain port, silent; any server would do). On deletion the kubelet"
say "runs the proxy's preStop hook, proxy-supervisor prestop, which starts the drain and"
say "blocks until the app's port is closed and Envoy's connections are done."
supervise "$work/web" --drain-min 1s --drain-timeout 20s
"$ps" wait --control-dir "$work/web" --timeout 10s && echo "[hook] postStart wait: proxy ready"
"$envoy" --admin-addr "$APP_ADMIN" --listener "app=$APP,tcp" --log-level error &
app=$!; pids+=($app)
until_ok listening "$APP"
echo "[pod] deleted: the kubelet runs the proxy's preStop hook"
"$ps" prestop --control-dir "$work/web" --timeout 20s && echo "[hook] preStop returned: drained" &
hook=$!
until_ok unready "$HEALTH"
echo "[pod] status during the drain (proxy-supervisor status):"
"$ps" status --control-dir "$work/web" | sed 's/^/    /'
say "\"ready\": true is Envoy's own readiness from its admin API: Envoy still serves while it"
say "drains. What Kubernetes reads is /healthz/ready, already 503 since the drain started:"
echo "    GET http://$HEALTH/healthz/ready: $(healthz "$HEALTH")"
say "\"exit_code\": 0 is already fixed: a deleted pod's proxy exits 0 whatever comes later."
echo "[app] SIGTERM from the kubelet: the app closes its port"
kill -TERM "$app"
wait "$hook" || true
say "The drain ended once the app's port closed; the kubelet now SIGTERMs the proxy"
say "container: the supervisor re-checks that nothing has opened again (the drain held"
say "its 300 ms quiet period once already, so there is no second one), then stops Envoy."
kill -TERM "$sup"
wait "$sup" && code=0 || code=$?
echo "[pod] proxy container exited $code"

step "5. A native sidecar's Job: postStart wait holds the app; the kubelet stops the proxy once the app has gone"
say "Kubernetes 1.29+: the proxy is an init container with restartPolicy Always, run as"
say "supervise --native-sidecar. The kubelet starts the app only once the sidecar's postStart"
say "hook has returned: proxy-supervisor wait, which returns the moment the proxy is ready"
say "(a startupProbe is polled once a second). The app here is a plain command, not wrapped"
say "in exec: with a native sidecar the kubelet orders the end too, so it need not report."
supervise "$work/native" --native-sidecar
start=$(date +%s%N)
"$ps" wait --control-dir "$work/native" --timeout 10s &&
  echo "[hook] postStart wait returned $(( ($(date +%s%N) - start) / 1000000 )) ms after the container started (the fake Envoy takes 300 ms to be ready)"
echo "[pod] the kubelet starts the app"
sh -c 'echo "[app] running the job"; sleep 1; echo "[app] done, exit 0"'
say "Every regular container has exited: the kubelet runs the sidecar's preStop, which"
say "starts the drain and returns at once (native-sidecar), then sends it SIGTERM."
"$ps" prestop --control-dir "$work/native" --timeout 20s && echo "[hook] preStop returned"
kill -TERM "$sup"
wait "$sup" && code=0 || code=$?
echo "[pod] the sidecar exited $code; the Job's pod completes"
echo "[pod] its termination message: $(cat "$work/native/termination-log")"
