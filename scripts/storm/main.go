// Command storm is the orphan-storm workload of docs/benchmarks.md. Run it as
// the child of a reaper that is PID 1 of a fresh PID namespace with its own
// /proc:
//
//	unshare --pid --fork --mount-proc REAPER -- storm -n 5000
//
// It starts an intermediate process that forks N children which exit at once,
// and exits without ever waiting for them, so N zombies pass to PID 1
// together, the way a proxy's helper scripts orphan their children. The
// intermediate is perl (perl-base is Essential on Debian, and unlike a shell
// it never reaps behind our back: dash reaps its background jobs itself). It then
// watches /proc until no process other than PID 1 and itself is left, and
// prints one line:
//
//	storm n=5000 handed=4987 spawn_ms=612.4 reap_ms=21.7 total_ms=634.1 left=0
//
// spawn_ms is the start until the intermediate has exited (the reparenting is
// done by then), reap_ms from there until nothing is left, total_ms the sum;
// handed is how many were left at the hand-off. It exits 1 if any are left
// after --timeout.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"
)

func main() {
	n := flag.Int("n", 5000, "how many orphans")
	timeout := flag.Duration("timeout", 30*time.Second, "give up when they are not all reaped by then")
	flag.Parse()
	self := os.Getpid()
	if self == 1 {
		fail("storm must run under a reaper that is PID 1, not as PID 1")
	}
	if link, err := os.Readlink("/proc/self"); err != nil || link != strconv.Itoa(self) {
		fail("/proc is not this PID namespace's: run under unshare --pid --fork --mount-proc")
	}
	if others(self) != 0 {
		fail("other processes share the namespace; the count would be wrong")
	}

	start := time.Now()
	// The children _exit at once and perl never waits, so they pile up as
	// its zombies and pass to PID 1 when it exits.
	sh := exec.Command("perl", "-MPOSIX", "-e",
		`for (1..$ARGV[0]) { my $p = fork; die "fork: $!\n" unless defined $p; POSIX::_exit(0) unless $p }`,
		strconv.Itoa(*n))
	sh.Stderr = os.Stderr
	if err := sh.Run(); err != nil {
		fail("intermediate: " + err.Error())
	}
	handoff := time.Now()
	handed := others(self)
	left := handed
	for left > 0 && time.Since(handoff) < *timeout {
		time.Sleep(100 * time.Microsecond)
		left = others(self)
	}
	end := time.Now()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	fmt.Printf("storm n=%d handed=%d spawn_ms=%.3f reap_ms=%.3f total_ms=%.3f left=%d\n",
		*n, handed, ms(handoff.Sub(start)), ms(end.Sub(handoff)), ms(end.Sub(start)), left)
	if left > 0 {
		os.Exit(1)
	}
}

// others counts the processes in the namespace other than PID 1 and self,
// zombies included: a zombie keeps its /proc entry until it is reaped.
func others(self int) int {
	d, err := os.Open("/proc")
	if err != nil {
		fail(err.Error())
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		fail(err.Error())
	}
	n := 0
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err == nil && pid != 1 && pid != self {
			n++
		}
	}
	return n
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "storm:", msg)
	os.Exit(2)
}
