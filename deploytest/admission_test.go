package deploytest

import (
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// The label that asks for injection, and the annotation it needs.
const (
	injectLabel       = "proxy-supervisor.io/inject"
	envoyConfigAnnot  = "proxy-supervisor.io/envoy-config"
	admissionPolicyMD = root + "/docs/admission-policy.md"
	// The validating policy that refuses a pod, labelled or not, whose
	// restart rules the supervisor is not told of.
	peerRestartPolicy = "proxy-supervisor-peer-restart"
)

// The admission policies of deploy/admission-policy/, decoded strictly
// into the API's types by deployDocs: each binding names its policy, the
// injection's two select the pods by the label alone, at their creation,
// and the --peer-restart guard every pod; all three fail closed; every annotation the mutation reads is one the validation
// checks and the adoption page lists, and the page lists no other; the
// sample Job asks for injection as the page says. The policies' CEL is
// compiled and run by the real API server in kubelettest's cluster mode.
func TestAdmissionPolicies(t *testing.T) {
	var (
		mutating  *admissionv1.MutatingAdmissionPolicy
		mbinding  *admissionv1.MutatingAdmissionPolicyBinding
		validate  *admissionv1.ValidatingAdmissionPolicy
		vbinding  *admissionv1.ValidatingAdmissionPolicyBinding
		guard     *admissionv1.ValidatingAdmissionPolicy // of --peer-restart, over every pod
		gbinding  *admissionv1.ValidatingAdmissionPolicyBinding
		job       *batchv1.Job
		configMap string
	)
	for _, d := range deployDocs(t) {
		if strings.HasPrefix(d.file, "istio/") {
			continue // install-first.yaml's policy: TestIstioInstallFirst
		}
		switch o := d.obj.(type) {
		case *admissionv1.MutatingAdmissionPolicy:
			mutating = o
		case *admissionv1.MutatingAdmissionPolicyBinding:
			mbinding = o
		case *admissionv1.ValidatingAdmissionPolicy:
			if o.Name == peerRestartPolicy {
				guard = o
			} else {
				validate = o
			}
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			if o.Spec.PolicyName == peerRestartPolicy {
				gbinding = o
			} else {
				vbinding = o
			}
		case *batchv1.Job:
			if strings.HasPrefix(d.file, "admission-policy/") {
				job = o
			}
		case *corev1.ConfigMap:
			configMap = o.Name
		}
	}
	if mutating == nil || mbinding == nil || validate == nil || vbinding == nil || guard == nil || gbinding == nil || job == nil {
		t.Fatal("deploy/admission-policy/ lacks a policy, a binding or the sample Job")
	}
	if mbinding.Spec.PolicyName != mutating.Name || vbinding.Spec.PolicyName != validate.Name {
		t.Errorf("the bindings name %q and %q, the policies are %q and %q", mbinding.Spec.PolicyName, vbinding.Spec.PolicyName, mutating.Name, validate.Name)
	}
	for _, b := range []*admissionv1.ValidatingAdmissionPolicyBinding{vbinding, gbinding} {
		if !slices.Equal(b.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) {
			t.Errorf("the validating binding %s's actions %q, want Deny: a bad pod is refused", b.Name, b.Spec.ValidationActions)
		}
	}
	// The guard sees every pod at its creation, labelled or not: a pod
	// written by hand is what it is for.
	if m := guard.Spec.MatchConstraints; m == nil || m.ObjectSelector != nil || m.NamespaceSelector != nil || len(m.ResourceRules) != 1 ||
		!slices.Equal(m.ResourceRules[0].Resources, []string{"pods"}) || !slices.Equal(m.ResourceRules[0].Operations, []admissionv1.OperationType{admissionv1.Create}) {
		t.Errorf("the %s policy's constraints %+v, want every pod at CREATE", peerRestartPolicy, m)
	}
	for name, m := range map[string]*admissionv1.MatchResources{"mutating": mutating.Spec.MatchConstraints, "validating": validate.Spec.MatchConstraints} {
		if m == nil || m.ObjectSelector == nil || !maps.Equal(m.ObjectSelector.MatchLabels, map[string]string{injectLabel: "true"}) || len(m.ObjectSelector.MatchExpressions) > 0 {
			t.Errorf("the %s policy does not select the pods by %s=true alone: %+v", name, injectLabel, m)
			continue
		}
		if len(m.ResourceRules) != 1 || !slices.Equal(m.ResourceRules[0].Resources, []string{"pods"}) ||
			!slices.Equal(m.ResourceRules[0].Operations, []admissionv1.OperationType{admissionv1.Create}) {
			t.Errorf("the %s policy's rules %+v, want pods at CREATE", name, m.ResourceRules)
		}
	}
	for name, p := range map[string]*admissionv1.FailurePolicyType{"mutating": mutating.Spec.FailurePolicy, "validating": validate.Spec.FailurePolicy, peerRestartPolicy: guard.Spec.FailurePolicy} {
		if p == nil || *p != admissionv1.Fail {
			t.Errorf("the %s policy's failurePolicy %v, want Fail: a pod that asked for the proxy is never created without it", name, p)
		}
	}
	// The annotations each reads, from the policies' text.
	annotations := func(file string) []string {
		raw, err := os.ReadFile(root + "/deploy/admission-policy/" + file)
		if err != nil {
			t.Fatal(err)
		}
		found := regexp.MustCompile(`proxy-supervisor\.io/[a-z-]+`).FindAllString(stripComments(string(raw)), -1)
		return slices.Compact(slices.Sorted(slices.Values(found)))
	}
	read, checked := annotations("mutating-policy.yaml"), annotations("validating-policy.yaml")
	if !slices.Equal(read, checked) {
		t.Errorf("the mutation reads %q, the validation checks %q", read, checked)
	}
	page, err := os.ReadFile(admissionPolicyMD)
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(proxy-supervisor\\.io/[a-z-]+)`").FindAllStringSubmatch(string(page), -1) {
		listed = append(listed, m[1])
	}
	slices.Sort(listed)
	if !slices.Equal(listed, read) {
		t.Errorf("%s lists %q, the policies use %q", admissionPolicyMD, listed, read)
	}
	tpl := job.Spec.Template
	if tpl.Labels[injectLabel] != "true" || tpl.Annotations[envoyConfigAnnot] != configMap {
		t.Errorf("the sample Job's pod has labels %v and annotations %v, want %s=true and %s=%s (envoy-config.yaml's ConfigMap)",
			tpl.Labels, tpl.Annotations, injectLabel, envoyConfigAnnot, configMap)
	}
}
