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
// The cluster mode registers the same kubelet with a control plane run in
// the node's namespaces (etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, and a cluster DNS address that answers NXDOMAIN), and
// its scenarios (TestCluster*) run the forms as Jobs and CronJobs through
// the API, asserting what the API reports. The control plane is built into
// the kubelet's cache (controlplane/go.mod pins it, many minutes cold) and
// etcd is Debian's etcd-server, fetched with apt-get download and unpacked
// beside it; where either is missing those scenarios alone skip, loudly,
// or fail when CI=true.
//
// The client image (the classic forms' install container), the Envoy
// image (the native form's one container) and the Istio image are built
// from images/ with Debian's buildah, as users build them, with the binary
// the suite built as BINARY and, as the base, the suite's own fake Envoy
// or Istio image without the supervisor; TestShippedImages skips without buildah, or
// fails when CI=true.
//
// It is its own Go module so that the kubelet's dependencies never reach the
// main module's. The kubelet is built once into the user's cache
// (kubelet/go.mod pins it), and pilot-agent beside it. The suite installs
// nothing: without root, the runtime or namespaces it skips with one line
// saying what is missing, and fails instead when CI=true.
package kubelettest
