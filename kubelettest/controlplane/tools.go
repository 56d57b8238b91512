//go:build tools

// Package controlplane pins the control plane the real-kubelet suite's
// cluster mode builds (kube-apiserver, kube-controller-manager and
// kube-scheduler, the kubelet's version): as kubelet/ does, the kubernetes
// module's staging modules are replaced by their published versions.
package controlplane

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
