//go:build !race

package proctest

// Race reports whether this test binary runs with the race detector; the
// binaries Build makes are then race-instrumented too.
const Race = false
