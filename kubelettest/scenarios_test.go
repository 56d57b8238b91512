package kubelettest

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// jobTimeout bounds a Job's pod from its manifest to its final phase: the
// proxy is ready in well under a second, the rest is the kubelet's own
// pace (sandbox, three containers, status sync) on a busy 2-core machine.
const jobTimeout = 90 * time.Second

func TestJobNeverSucceeds(t *testing.T) {
	t.Parallel()
	n := theNode
	n.run(t, podFrom(t, "job.yaml", "never-ok", "/podapp", "get", hello))
	p := n.waitPhase(t, "never-ok", jobTimeout, corev1.PodSucceeded)
	wantExits(t, p, map[string]exited{"install": {0, 0}, "envoy": {0, 0}, "job": {0, 0}})
}
