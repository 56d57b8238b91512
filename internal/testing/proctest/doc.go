// Package proctest is the one layer of the tests that run processes, shared
// by the product's tests and by the nested test modules (e2e, deploytest,
// kubelettest): it builds the project's binaries once per test binary, each
// in its own module, starts processes with their output kept for
// assertions (its first and last MiB: see Buffer), runs code and processes
// inside network namespaces, waits for their exit with a bound, waits for a
// log line or any other observable state, and hands out free ports and temp
// dirs short enough for unix socket paths.
//
// It is imported only from _test.go files; no product code may depend on it.
//
// Under the race detector (go test -race) the binaries it builds are
// race-instrumented too, so that the races of the processes a test drives
// fail that test: a process whose output reports a data race fails it at
// cleanup.
package proctest
