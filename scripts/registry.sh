# registry.sh, sourced by release.sh and publish.sh: start_registry BIN
# STORAGE LOG starts the CNCF distribution registry (BIN) over STORAGE, on
# a free loopback port, in a PID namespace of its own, and sets reg
# (host:port) and regpid. stop_registry, which the caller's EXIT trap runs,
# kills unshare by its pid (SIGKILL: unshare --fork ignores SIGTERM while it
# waits), and --kill-child then kills the registry, as it does when the
# script itself is killed. Plain HTTP, on loopback only: it is the
# release's own.
regpid=
stop_registry() {
  [ -n "$regpid" ] || return 0
  kill -KILL "$regpid" 2>/dev/null
  wait "$regpid" 2>/dev/null || true # 137: it was killed
  regpid=
}
start_registry() {
  local bin=$1 storage=$2 log=$3 config=$3.yml port i
  for ((attempt = 0; attempt < 5; attempt++)); do
    port=$((20000 + RANDOM % 20000))
    cat > "$config" <<YML
version: 0.1
log: {level: warn, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: $storage}}
http: {addr: 127.0.0.1:$port}
YML
    OTEL_TRACES_EXPORTER=none OTEL_SDK_DISABLED=true unshare --pid --fork --kill-child "$bin" serve "$config" > "$log" 2>&1 &
    regpid=$!
    reg=127.0.0.1:$port
    for ((i = 0; i < 300; i++)); do
      curl -sf -o /dev/null "http://$reg/v2/" && return 0
      kill -0 $regpid 2>/dev/null || break
      sleep 0.1
    done
    stop_registry
    grep -q 'address already in use' "$log" || break # another port only for a port in use
  done
  echo "registry: did not start: $(tail -n 3 "$log")" >&2
  return 1
}
