package kubelettest

import (
	"regexp"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The supervisor's exit summary reaches the pod's status through the
// kubelet's default terminationMessagePath: for a native sidecar, which
// the kubelet stops once the app has exited, and for a classic one, which
// the app's failure stops with the app's code.
func TestTerminationMessageInPodStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, manifest string
		app            []string
		phase          corev1.PodPhase
		want           string
	}{
		{"termmsg-native", "job-native-sidecar.yaml", []string{"/podapp", "get", hello}, corev1.PodSucceeded,
			`^proxy-supervisor: exit 0 \((preStop|SIGTERM)\); ready [0-9.]+m?s after start; exit [0-9.]+m?s after the decision\n?$`},
		{"termmsg-classic", "job.yaml", []string{"/podapp", "get", hello, "exit", "3"}, corev1.PodFailed,
			`^proxy-supervisor: exit 3 \(peer job failed with code 3\); ready [0-9.]+m?s after start; exit [0-9.]+m?s after the decision\n?$`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n := theNode
			n.run(t, podFrom(t, tc.manifest, tc.name, tc.app...))
			n.waitPhase(t, tc.name, jobTimeout, tc.phase)
			p := n.waitPod(t, tc.name, 30*time.Second, "the proxy terminated", func(p *corev1.Pod) bool {
				s := status(p, "envoy")
				return s != nil && s.State.Terminated != nil
			})
			msg := status(p, "envoy").State.Terminated.Message
			if !regexp.MustCompile(tc.want).MatchString(msg) {
				t.Fatalf("the proxy's termination message %q, want it to match %s:\n%s", msg, tc.want, describe(p))
			}
			t.Logf("pod %s: the proxy's termination message: %q", tc.name, msg)
		})
	}
}
