package control

import (
	"log/slog"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// hooks are the processes that asked for a drain: the proxy's preStop hook,
// `prestop`, run by the kubelet inside the proxy container. Once the drain
// is answered the supervisor may stop at once (every peer had completed,
// say), and when the container's first process exits the runtime kills
// every other process in it. A hook killed between its answer and its own
// exit is a FailedPreStopHook event on a termination that went as designed.
// So the server holds each caller by a pidfd, opened while it is still
// connected (a pid alone could be reused by then), and Close lets them exit
// first. A caller outside this pid namespace has no pid here and is not
// held; its container's end does not take it down anyway.
type hooks struct {
	mu  sync.Mutex
	fds []int
}

// maxHooks bounds the pidfds held: a client that floods the socket with
// drain requests costs a descriptor per live caller, never more.
const maxHooks = 16

func (h *hooks) add(pid int) {
	if pid <= 0 || pid == os.Getpid() {
		return // not in this pid namespace, or this process itself: it will not be killed before we exit
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return // gone already, or a kernel before 5.3: nothing to hold
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fds = live(h.fds, 0)
	if len(h.fds) >= maxHooks {
		unix.Close(fd)
		return
	}
	h.fds = append(h.fds, fd)
}

// wait blocks until every held caller has exited, or bound has passed.
func (h *hooks) wait(bound time.Duration, log *slog.Logger) {
	h.mu.Lock()
	defer h.mu.Unlock()
	deadline := time.Now().Add(bound)
	if len(h.fds) > 0 {
		log.Debug("control socket: waiting for the processes that asked for a drain to exit", "processes", len(h.fds))
	}
	for len(h.fds) > 0 {
		left := time.Until(deadline)
		if left <= 0 {
			log.Warn("control socket: a process that asked for a drain has not exited; stopping anyway", "processes", len(h.fds), "waited", bound)
			h.fds = live(h.fds, -1)
			return
		}
		h.fds = live(h.fds, left)
	}
}

// live polls fds for up to timeout (0: not at all, negative: closes them
// all) and returns those whose process has not exited, closing the others.
func live(fds []int, timeout time.Duration) []int {
	if timeout < 0 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil
	}
	pfds := make([]unix.PollFd, len(fds))
	for i, fd := range fds {
		pfds[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
	}
	if _, err := unix.Poll(pfds, int(timeout.Milliseconds())); err != nil && err != unix.EINTR {
		return live(fds, -1)
	}
	kept := fds[:0]
	for i, p := range pfds {
		if p.Revents != 0 {
			unix.Close(fds[i])
			continue
		}
		kept = append(kept, fds[i])
	}
	return kept
}
