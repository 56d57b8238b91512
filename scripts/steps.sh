# steps.sh: sourced by scripts/release.sh and scripts/publish.sh, which set
# step (the word their lines start with) and work (a directory of theirs)
# first.
#
# say TEXT      prints a line of the run.
# fail TEXT     prints why the run stops, and stops it.
# quiet WHAT COMMAND...
#               runs COMMAND with its output kept in $work/out, which a
#               failure prints the end of.
say() { printf '%s: %s\n' "$step" "$*"; }
fail() { printf '%s: FAILED: %s\n' "$step" "$*" >&2; exit 1; }
quiet() {
  local what=$1
  shift
  "$@" > "$work/out" 2>&1 || fail "$what: $(tail -n 5 "$work/out")"
}
