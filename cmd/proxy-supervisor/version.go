package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/proxy-supervisor/proxy-supervisor/internal/supervise"
)

// The build's version, commit and date, as the Makefile, images/ and
// scripts/version.sh give them:
//
//	-ldflags "-X main.version=0.1.0 -X main.commit=<40 hex> -X main.date=<RFC 3339, UTC>"
//
// A build without them (go build, go install) says what the Go toolchain
// stamped instead (build).
var version, commit, date string

// unknown is a field of the build that neither -X nor the toolchain told.
const unknown = "unknown"

// build is what this binary says of itself in the version command and in
// the proxy_supervisor_build_info metric: -X's values first, then the
// module's version and the commit and its time that the toolchain stamped
// (go install module@v0.1.0 stamps the version; go build in a git work
// tree, unless -buildvcs=false, the commit), then unknown.
func build(info *debug.BuildInfo, ok bool) supervise.Build {
	b := supervise.Build{Version: version, Commit: commit, Date: date, GoVersion: runtime.Version()}
	if ok {
		if v := info.Main.Version; b.Version == "" && v != "" && v != "(devel)" {
			b.Version = strings.TrimPrefix(v, "v")
		}
		for _, s := range info.Settings {
			switch {
			case s.Key == "vcs.revision" && b.Commit == "":
				b.Commit = s.Value
			case s.Key == "vcs.time" && b.Date == "":
				b.Date = s.Value // the commit's time: the source's date
			}
		}
	}
	for _, f := range []*string{&b.Version, &b.Commit, &b.Date} {
		if *f == "" {
			*f = unknown
		}
	}
	return b
}

// binaryBuild is this binary's build.
func binaryBuild() supervise.Build { return build(debug.ReadBuildInfo()) }

func runVersion(args []string, env func(string) string, stdout, stderr io.Writer) int {
	f := newFlags("version", "version", "Prints this binary's version, commit, build date and Go release on one line.")
	if code, done := parseFlagsOnly(f, args, env, stdout, stderr); done || f.checkOnly() {
		return code
	}
	b := binaryBuild()
	fmt.Fprintf(stdout, "proxy-supervisor %s (commit %s, date %s, %s)\n", b.Version, b.Commit, b.Date, b.GoVersion)
	return 0
}
