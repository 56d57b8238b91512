// Package kubelettest runs the repository's deploy/ manifests in a real
// kubelet: containerd, runc and a kubelet built from the Go module proxy, in
// standalone mode (static pods, no API server), isolated in their own mount
// and network namespaces. Each test asserts the pods' phases and container
// exit codes as the kubelet reports them. TestPodFigures measures each form
// of the proxy container at the pod's level (proxy ready → app started, app
// exit → proxy exit, → the pod's phase, deletion → every container exited)
// beside a baseline gated as Istio's native injection is, and prints them as
// the ROW lines make bench reports (KUBELETTEST_FIGURE_RUNS pods of each).
//
// The Istio scenarios run the real pilot-agent as the supervisor's child,
// without istiod, with the fake Envoy as its Envoy; it is built by
// scripts/pilot-agent.sh (as make bench builds it), and where it does not
// build those scenarios alone skip, loudly, or fail when CI=true.
//
// It is its own Go module so that the kubelet's dependencies never reach the
// main module's. The kubelet is built once into the user's cache
// (kubelet/go.mod pins it), and pilot-agent beside it. The suite installs
// nothing: without root, the runtime or namespaces it skips with one line
// saying what is missing, and fails instead when CI=true.
package kubelettest
