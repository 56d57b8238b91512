package proctest

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// Netns is a network namespace, named by a path that holds it open for as
// long as the test needs it: /proc/PID/ns/net of a process in it.
type Netns string

// NetnsOf is the network namespace of process pid.
func NetnsOf(pid int) Netns { return Netns(fmt.Sprintf("/proc/%d/ns/net", pid)) }

// Do calls fn on a thread that has entered the namespace: the sockets it
// makes, and the processes it forks, are the namespace's. The thread is
// the call's own, so that a thread that cannot leave again serves no
// other goroutine.
func (ns Netns) Do(fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- fmt.Errorf("netns: %w", err)
			return
		}
		defer self.Close()
		target, err := os.Open(string(ns))
		if err != nil {
			runtime.UnlockOSThread()
			ch <- fmt.Errorf("netns: %w", err)
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- fmt.Errorf("netns: setns %s: %w", ns, err)
			return
		}
		err = fn()
		// A thread left in the namespace stays locked, and so ends with
		// this goroutine.
		if rerr := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); rerr != nil {
			ch <- fmt.Errorf("netns: restore: %w", rerr)
			return
		}
		runtime.UnlockOSThread()
		ch <- err
	}()
	return <-ch
}

// Dial connects from inside the namespace; it fits
// http.Transport.DialContext.
func (ns Netns) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := ns.Do(func() (err error) {
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Listen listens inside the namespace.
func (ns Netns) Listen(network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := ns.Do(func() (err error) {
		ln, err = net.Listen(network, addr)
		return err
	})
	return ln, err
}

// ListenPacket listens for packets inside the namespace.
func (ns Netns) ListenPacket(network, addr string) (net.PacketConn, error) {
	var c net.PacketConn
	err := ns.Do(func() (err error) {
		c, err = net.ListenPacket(network, addr)
		return err
	})
	return c, err
}

// Nsenter is the argv that runs argv, by nsenter(1), in namespaces of
// process pid: kinds are nsenter's long options without dashes ("net",
// "mount", "pid"). With no argv it is a prefix for one.
func Nsenter(pid int, kinds []string, argv ...string) []string {
	out := []string{"nsenter", "--target", strconv.Itoa(pid)}
	for _, k := range kinds {
		out = append(out, "--"+k)
	}
	return append(append(out, "--"), argv...)
}
