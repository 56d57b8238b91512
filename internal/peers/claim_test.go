package peers

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Two execs of one name started together must never both run: the check
// that the name is free and the claim of it are one step.
func TestBeginTogetherNeverBothRun(t *testing.T) {
	d := newDir(t)
	const tries = 300
	double, none := 0, 0
	for range tries {
		start := make(chan struct{})
		var won atomic.Int32
		runs := make([]*Run, 2)
		var wg sync.WaitGroup
		for i := range runs {
			wg.Go(func() {
				<-start
				if r, err := d.Begin("job"); err == nil {
					runs[i] = r
					won.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		switch won.Load() {
		case 2:
			double++
		case 0:
			none++
		}
		for _, r := range runs {
			if r != nil {
				if err := r.Finish(0, Exited, Stop{}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if double > 0 || none > 0 {
		t.Fatalf("of %d pairs begun together, %d ran both and %d ran neither; want exactly one each time", tries, double, none)
	}
}

// A claim file is never followed: a symlink planted in its place makes
// Begin refuse, and what it names is left alone.
func TestPlantedClaimSymlinkIsRefused(t *testing.T) {
	d := newDir(t)
	target := filepath.Join(t.TempDir(), "target")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(d.Path(), claimPrefix+"job")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Begin("job"); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("Begin with a planted claim symlink: %v", err)
	}
	if fi, err := os.Stat(target); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the symlink's target changed: %v %v", fi.Mode(), err)
	}
}
