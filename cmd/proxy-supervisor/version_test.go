package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/proxy-supervisor/proxy-supervisor/internal/supervise"
)

// A build without -X says what the toolchain stamped: go install's module
// version (its v dropped, as the tags' is), go build's commit and its time;
// -X's values win over them, and what neither told is unknown.
func TestBuildFallsBackOnTheToolchain(t *testing.T) {
	defer func(v, c, d string) { version, commit, date = v, c, d }(version, commit, date)
	stamped := &debug.BuildInfo{
		Main: debug.Module{Version: "v0.1.0"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "ad2e2aee3792defa248cd419f17f0b431dd8eff1"},
			{Key: "vcs.time", Value: "2026-11-27T11:43:09Z"},
			{Key: "vcs.modified", Value: "false"},
		},
	}
	for _, tt := range []struct {
		name                  string
		version, commit, date string // -X's
		info                  *debug.BuildInfo
		ok                    bool
		want                  supervise.Build
	}{
		{"nothing", "", "", "", nil, false, supervise.Build{Version: unknown, Commit: unknown, Date: unknown}},
		{"go build outside git", "", "", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, true,
			supervise.Build{Version: unknown, Commit: unknown, Date: unknown}},
		{"go install", "", "", "", stamped, true,
			supervise.Build{Version: "0.1.0", Commit: "ad2e2aee3792defa248cd419f17f0b431dd8eff1", Date: "2026-11-27T11:43:09Z"}},
		{"make build", "0.1.0+g65c9c78a0984", "65c9c78a0984dc6e083225f2a0a83b39c8c63599", "2026-12-01T23:00:00Z", stamped, true,
			supervise.Build{Version: "0.1.0+g65c9c78a0984", Commit: "65c9c78a0984dc6e083225f2a0a83b39c8c63599", Date: "2026-12-01T23:00:00Z"}},
		{"an image without make's arguments", "0.1.0", "", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, true,
			supervise.Build{Version: "0.1.0", Commit: unknown, Date: unknown}},
	} {
		version, commit, date = tt.version, tt.commit, tt.date
		tt.want.GoVersion = runtime.Version()
		if got := build(tt.info, tt.ok); got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

// The release that a tree without git builds (VERSION's) is the latest of
// CHANGELOG.md, and a semantic version.
func TestVersionFileIsTheChangelogsLatest(t *testing.T) {
	v, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	release := strings.TrimSpace(string(v))
	if !semver.MatchString(release) || strings.Contains(release, "+") {
		t.Errorf("VERSION holds %q, want a release's semantic version such as 0.1.0", release)
	}
	log, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^## \[(\d[^\]]*)\] - \d{4}-\d{2}-\d{2}$`).FindSubmatch(log)
	if m == nil {
		t.Fatal("CHANGELOG.md has no release heading such as ## [0.1.0] - 2026-11-27")
	}
	if string(m[1]) != release {
		t.Errorf("CHANGELOG.md's latest release is %s, VERSION says %s: a release changes both", m[1], release)
	}
	if !strings.Contains(string(log), "\n## [Unreleased]\n") {
		t.Error("CHANGELOG.md has no ## [Unreleased] section")
	}
}

// semver is Semantic Versioning 2.0.0's grammar.
var semver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
	`(-(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?` +
	`(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?$`)

// scripts/version.sh, in a copy of the tree's VERSION and CHANGELOG.md,
// through a release's life: no git (a source archive), git before any
// tag, at the tag, past it, and with changes to tracked files; and a
// source archive unpacked inside another repository, whose commit is not
// its own. Every answer is a semantic version.
func TestVersionScheme(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git on PATH")
	}
	script, err := filepath.Abs("../../scripts/version.sh")
	if err != nil {
		t.Fatal(err)
	}
	tree := t.TempDir()
	for _, f := range []string{"VERSION", "CHANGELOG.md"} {
		b, err := os.ReadFile("../../" + f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tree, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(tree, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "scripts", "version.sh"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	v, _ := os.ReadFile(filepath.Join(tree, "VERSION"))
	release := strings.TrimSpace(string(v))

	env := append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_SYSTEM=/dev/null",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@localhost", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@localhost")
	run := func(dir string, extra []string, name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = dir, append(env, extra...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %v: %v", name, args, err)
		}
		return strings.TrimSpace(string(out))
	}
	git := func(args ...string) string { t.Helper(); return run(tree, nil, gitBin, args...) }
	versionSh := func(what string, extra ...string) string {
		t.Helper()
		return run(tree, extra, "sh", "scripts/version.sh", what)
	}
	check := func(when, want string) {
		t.Helper()
		got := versionSh("version")
		if got != want {
			t.Errorf("%s: version %q, want %q", when, got, want)
		}
		if !semver.MatchString(got) {
			t.Errorf("%s: version %q is not a semantic version", when, got)
		}
	}

	check("a source archive", release)
	if c := versionSh("commit"); c != "" {
		t.Errorf("a source archive: commit %q, want none", c)
	}
	if d := versionSh("date", "SOURCE_DATE_EPOCH=1764244989"); d != "2025-11-27T12:03:09Z" {
		t.Errorf("SOURCE_DATE_EPOCH=1764244989: date %q, want 2025-11-27T12:03:09Z", d)
	}
	if d := versionSh("date"); !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`).MatchString(d) {
		t.Errorf("date %q, want RFC 3339 in UTC", d)
	}

	git("init", "-q")
	git("add", ".")
	git("commit", "-q", "-m", "first")
	short := "g" + git("rev-parse", "--short=12", "HEAD")
	check("git, no tag", release+"+"+short)
	if c, head := versionSh("commit"), git("rev-parse", "HEAD"); c != head {
		t.Errorf("commit %q, want HEAD's %q", c, head)
	}
	git("tag", "v"+release)
	git("tag", "other-1.0") // not a release tag
	check("at the tag", release)
	if err := os.WriteFile(filepath.Join(tree, "new.go"), []byte("package x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	check("at the tag, with a file git does not track", release) // as git describe --dirty and make bench judge it
	git("add", ".")
	check("at the tag, with a change added", release+"+dirty")
	git("commit", "-q", "-m", "second")
	git("commit", "-q", "--allow-empty", "-m", "third")
	short = "g" + git("rev-parse", "--short=12", "HEAD")
	check("two commits past the tag", release+"+2."+short)
	if err := os.WriteFile(filepath.Join(tree, "new.go"), []byte("package y\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	check("past the tag, changed", release+"+2."+short+".dirty")

	// A source archive unpacked in another repository's work tree.
	archive := filepath.Join(tree, "archive")
	for _, f := range []string{"VERSION", "CHANGELOG.md", "scripts/version.sh"} {
		b, err := os.ReadFile(filepath.Join(tree, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(archive, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(archive, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := run(archive, nil, "sh", "scripts/version.sh", "version"); got != release {
		t.Errorf("a source archive inside another repository: version %q, want %q", got, release)
	}
	if got := run(archive, nil, "sh", "scripts/version.sh", "commit"); got != "" {
		t.Errorf("a source archive inside another repository: commit %q, want none", got)
	}
	// Without VERSION, CHANGELOG.md's latest release.
	if err := os.Remove(filepath.Join(archive, "VERSION")); err != nil {
		t.Fatal(err)
	}
	if got := run(archive, nil, "sh", "scripts/version.sh", "version"); got != release {
		t.Errorf("a source archive without VERSION: version %q, want CHANGELOG.md's %q", got, release)
	}
}
