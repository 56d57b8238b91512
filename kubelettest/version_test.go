package kubelettest

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/proxy-supervisor/proxy-supervisor/kubelettest/internal/builds"
)

// theVersion is the Kubernetes release the suite built and runs: v1.37.2,
// or another that K8S_VERSION names (builds.Version).
var theVersion string

// needMinor skips t where the suite runs a Kubernetes older than 1.minor,
// which lacks what t uses: a scenario of a newer release is no failure on
// an older one, and the skip says which release it needs.
func needMinor(t *testing.T, minor int, what string) {
	t.Helper()
	if builds.Minor() < minor {
		t.Skipf("Kubernetes %s: %s needs 1.%d or later", theVersion, what, minor)
	}
}

// betaMutating says whether the suite's Kubernetes serves
// MutatingAdmissionPolicy in admissionregistration.k8s.io/v1beta1 alone
// (1.34 and 1.35, where the API server turns it on by a feature gate and
// runtime-config: apiServerFeatures), not v1 (GA from 1.36).
func betaMutating() bool { return builds.Minor() < 36 }

// apiServerFeatures are the API server's flags for what the suite uses and
// its release does not turn on by default: on 1.34 and 1.35, the
// MutatingAdmissionPolicy beta, as docs/helm.md tells such a cluster's
// operator to enable it.
func apiServerFeatures() []string {
	if !betaMutating() {
		return nil
	}
	return []string{"--feature-gates=MutatingAdmissionPolicy=true", "--runtime-config=admissionregistration.k8s.io/v1beta1=true"}
}

// admissionClient is the REST client of the API version that serves an
// admission resource on the suite's Kubernetes: v1, but v1beta1 for the
// mutating policies where betaMutating.
func (c *cluster) admissionClient(resource string) rest.Interface {
	if betaMutating() && strings.HasPrefix(resource, "mutating") {
		return c.client.AdmissionregistrationV1beta1().RESTClient()
	}
	return c.client.AdmissionregistrationV1().RESTClient()
}

// forServedAPI is a document of deploy/admission-policy (written for
// admissionregistration.k8s.io/v1) in the API version the suite's
// Kubernetes serves its kind in: what the chart renders there.
func forServedAPI(doc []byte) []byte {
	if !betaMutating() {
		return doc
	}
	s := string(doc)
	for _, kind := range []string{"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"} {
		s = strings.Replace(s, "apiVersion: admissionregistration.k8s.io/v1\nkind: "+kind+"\n", "apiVersion: admissionregistration.k8s.io/v1beta1\nkind: "+kind+"\n", 1)
	}
	return []byte(s)
}

// lastRun is the previous run of a restarted container as the kubelet
// reports it (lastState.terminated), asserted to have exited with code. It
// is nil where a kubelet before 1.36 reported none: Kubernetes keeps it best
// effort (kubernetes#6652, #101044). Those kubelets rebuild it from the
// exited instances the runtime still holds, and delete the earlier one
// (podContainerDeletor keeps one dead container per name) once the next run
// has exited too, so a pod that has completed often reports none. From 1.36
// the kubelet carries it forward from the status it last reported (under
// RestartAllContainersOnContainerExits, on by default since then), and a
// missing one fails t.
func lastRun(t *testing.T, p *corev1.Pod, name string, code int32) *corev1.ContainerStateTerminated {
	t.Helper()
	s := status(p, name)
	if s == nil {
		t.Fatalf("pod %s has no container %s:\n%s", p.Name, name, describe(p))
	}
	last := s.LastTerminationState.Terminated
	switch {
	case last == nil && builds.Minor() < 36:
		t.Logf("pod %s: Kubernetes %s's kubelet reports no lastState for %s after its restart (restartCount %d): it deleted that run's container", p.Name, theVersion, name, s.RestartCount)
	case last == nil || last.ExitCode != code:
		t.Fatalf("pod %s: the first run of %s %+v, want exit %d:\n%s", p.Name, name, last, code, describe(p))
	}
	return last
}
