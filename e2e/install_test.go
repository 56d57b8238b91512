package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestInstallReadOnlyMount is the pod the manifests describe: an init
// container installs the binary into a subdirectory of a fresh emptyDir that
// does not exist yet, and an app container mounts that directory read-only.
// The app runs the binary from its mount but cannot replace it, and an init
// container that runs again replaces it atomically while the app's copy runs.
// The mount lives in a private mount namespace of a child (unshare -m), so
// it disappears with the child.
func TestInstallReadOnlyMount(t *testing.T) {
	for _, tool := range []string{"unshare", "mount", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	volume := t.TempDir()
	dir := filepath.Join(volume, "bin") // not created: install must create it
	if out, err := exec.Command(bin.supervisor, "install", dir).CombinedOutput(); err != nil {
		t.Fatalf("install %s: %v: %s", dir, err, out)
	}
	app := t.TempDir() // the app container's mount point
	// The app's long-running process is a wait on a control dir that never
	// gets a supervisor; it is the binary running from the read-only mount
	// while the init container installs again.
	script := `set -eu
mount --bind "$DIR" "$APP"
mount -o remount,bind,ro "$APP"
"$APP/proxy-supervisor" version
if cp /bin/sh "$APP/proxy-supervisor" 2>/dev/null; then echo "replaced through the read-only mount"; exit 1; fi
if "$APP/proxy-supervisor" install "$APP" 2>"$APP_ERR"; then echo "installed through the read-only mount"; exit 1; fi
"$APP/proxy-supervisor" wait --timeout 30s --control-dir "$DIR/none" 2>/dev/null &
running=$!
"$BIN" install "$DIR" >/dev/null
"$APP/proxy-supervisor" version
kill $running
wait $running || true
echo ok
`
	appErr := filepath.Join(t.TempDir(), "err")
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "DIR="+dir, "APP="+app, "BIN="+bin.supervisor, "APP_ERR="+appErr)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), "ok\n") || strings.Count(string(out), "proxy-supervisor ") != 2 {
		t.Fatalf("pod: %v\n%s", err, out)
	}
	msg, _ := os.ReadFile(appErr)
	if !strings.Contains(string(msg), "read-only file system") {
		t.Errorf("install through the read-only mount said %q, want a read-only file system error", msg)
	}
	// The private namespace died with the child: nothing stays mounted.
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), " "+app+" ") {
		t.Errorf("%s is still mounted", app)
	}
	if fi, err := os.Stat(filepath.Join(dir, "proxy-supervisor")); err != nil || fi.Mode() != 0o755 {
		t.Errorf("installed binary: %v, %v; want mode -rwxr-xr-x", fi, err)
	}
}

// A native sidecar that installs the binary itself (supervise --install):
// by the time wait returns, which is when the kubelet starts the app, the
// binary is in the volume whole, mode 0755, runnable by the app, and no
// temp file of the copy is left where an app could run it.
func TestSuperviseInstallsBeforeReady(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	dir := filepath.Join(p.dir, "bin") // not created: a fresh emptyDir
	sup := p.supervise([]string{"--install", dir})
	if code, out := p.client(soon, nil, "wait", "--control-dir", p.dir, "--timeout", "30s"); code != 0 {
		t.Fatalf("wait: %d: %s\n%s", code, out, sup.Out.String())
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 || entries[0].Name() != "proxy-supervisor" {
		t.Fatalf("%s holds %v (%v), want proxy-supervisor alone", dir, entries, err)
	}
	dst := filepath.Join(dir, "proxy-supervisor")
	if fi, err := os.Stat(dst); err != nil || fi.Mode() != 0o755 {
		t.Fatalf("installed binary: %v, %v; want mode -rwxr-xr-x", fi, err)
	}
	if out, err := exec.Command(dst, "version").CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "proxy-supervisor ") {
		t.Fatalf("the installed binary: %v: %s", err, out)
	}
	log := sup.Out.String()
	if i, j := strings.Index(log, `msg=installed path=`+dst), strings.Index(log, `msg="proxy started"`); i < 0 || j < i {
		t.Fatalf("want the install logged before the proxy started:\n%s", log)
	}
}

// An install that fails stops the supervisor before the proxy starts, exit
// 1, with the reason in the termination message: the sidecar is restarted
// and the app, held by the postStart wait, never runs without the binary.
func TestSuperviseInstallFails(t *testing.T) {
	t.Parallel()
	p := newPod(t)
	var dir string
	msg := p.failsBeforeProxy(func(file string) []string { dir = file + "/bin"; return []string{"--install", dir} })
	if want := "error: --install " + dir + ": "; !strings.Contains(msg, want) || !strings.Contains(msg, "not a directory") {
		t.Fatalf("termination message %q, want %q and why", msg, want)
	}
}

// A volume mounted noexec here (KEP-5855's bindMountOptions, or a noexec
// kubelet directory, which every bind mount of it inherits) would let the
// install succeed silently and an app container whose mount is noexec too
// then fail to start with runc's bare "permission denied": install, and
// supervise --install, copy all the same (only this container's mount is
// seen, and a native sidecar's apps may never run the binary) and say so
// in one line that names the mount and the ways out. A mount that runs
// binaries gets no such line. The tmpfs lives in a private mount namespace
// of a child (unshare -m).
func TestInstallWarnsOfANoexecVolume(t *testing.T) {
	for _, tool := range []string{"unshare", "mount", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	volume := t.TempDir()
	for _, tc := range []struct{ name, cmd string }{
		{"install", `"$BIN" install "$VOL/bin"`},
		{"supervise --install", `"$BIN" supervise --install "$VOL/bin" --control-dir "$VOL/ctl" -- /bin/true`},
	} {
		for _, opts := range []string{"noexec", "exec"} {
			script := `mount -t tmpfs -o ` + opts + ` tmpfs "$VOL" && ` + tc.cmd + ` && test -s "$VOL/bin/proxy-supervisor"; echo "exit $?"`
			cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script)
			cmd.Env = append(os.Environ(), "VOL="+volume, "BIN="+bin.supervisor)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s, %s: %v\n%s", tc.name, opts, err, out)
			}
			s := string(out)
			warned := strings.Contains(s, "is on a noexec mount here") && strings.Contains(s, "put the binary in the app's image")
			if !strings.Contains(s, "exit 0") || warned != (opts == "noexec") {
				t.Fatalf("%s into a %s tmpfs: %q, want the copy made, and a warning naming the mount and the way out only for noexec", tc.name, opts, s)
			}
		}
	}
}
