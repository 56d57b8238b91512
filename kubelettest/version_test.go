package kubelettest

import (
	"strings"
	"testing"

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
