//go:build tools

// Package kubelet pins the kubelet the real-kubelet suite builds: the
// kubernetes module's staging modules are replaced by their published
// versions, which is what lets cmd/kubelet build from the module proxy.
package kubelet

import (
	_ "k8s.io/kubernetes/cmd/kubelet"
)
