package kubelettest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
	"github.com/proxy-supervisor/proxy-supervisor/kubelettest/internal/builds"
)

const (
	// apiServer is the API server's address, in the node's network
	// namespace.
	apiServer = "127.0.0.1:6443"
	// serviceRange holds the Services' cluster IPs; the first is the API
	// server's own Service.
	serviceRange = "10.214.0.0/24"
	// clusterDNS is the kubelet's cluster DNS address, on the node's
	// loopback: it answers NXDOMAIN to every query, so that no pod waits on
	// a resolver that is not there.
	clusterDNS = "10.213.0.10"
)

// cluster is the control plane of the cluster mode, run in the node's
// namespaces beside containerd and the kubelet: etcd (its data in the
// node's /var/lib, a tmpfs), the API server, the controller manager and
// the scheduler, and the cluster DNS address's responder. The kubelet is
// registered with it as the only node.
type cluster struct {
	pki        string
	kubeconfig string
	etcd       *exec.Cmd
	apiserver  *exec.Cmd
	controller *exec.Cmd
	scheduler  *exec.Cmd
	dns        net.PacketConn
	client     kubernetes.Interface
}

// startAPIServer starts etcd and the API server, and the DNS responder;
// the kubelet, started next, registers with them.
func (n *node) startAPIServer(cp builds.ControlPlane) error {
	c := n.cluster
	if err := c.writePKI(); err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	if out, err := n.nsenter(context.Background(), "ip", "addr", "add", clusterDNS+"/32", "dev", "lo").CombinedOutput(); err != nil {
		return fmt.Errorf("the cluster DNS address: %v: %s", err, out)
	}
	var err error
	if c.dns, err = n.netns().ListenPacket("udp", clusterDNS+":53"); err != nil {
		return fmt.Errorf("the cluster DNS responder: %w", err)
	}
	go serveNXDOMAIN(c.dns)
	c.etcd, err = n.daemon("etcd", cp.Etcd, "--name", "kubelettest", "--data-dir", "/var/lib/etcd",
		"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "kubelettest=http://127.0.0.1:2380")
	if err != nil {
		return err
	}
	p := c.path
	c.apiserver, err = n.daemon("kube-apiserver", append([]string{cp.APIServer,
		"--etcd-servers", "http://127.0.0.1:2379",
		"--bind-address", "0.0.0.0", "--secure-port", "6443", "--advertise-address", nodeIP,
		"--service-cluster-ip-range", serviceRange,
		"--tls-cert-file", p("apiserver.crt"), "--tls-private-key-file", p("apiserver.key"),
		"--client-ca-file", p("ca.crt"),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", p("sa.pub"), "--service-account-signing-key-file", p("sa.key"),
		// One user, the suite's: its certificate is in system:masters.
		"--authorization-mode", "AlwaysAllow",
		"--profiling=false", "-v", "1"}, apiServerFeatures()...)...)
	if err != nil {
		return err
	}
	cfg := &rest.Config{
		Host: "https://" + apiServer,
		TLSClientConfig: rest.TLSClientConfig{
			CAFile: p("ca.crt"), CertFile: p("admin.crt"), KeyFile: p("admin.key"),
		},
		Dial:    n.netns().Dial,
		QPS:     50,
		Burst:   100,
		Timeout: 30 * time.Second,
	}
	if c.client, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if err := proctest.Poll(120*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := c.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	}); err != nil {
		return fmt.Errorf("the API server is not ready: %w", err)
	}
	return nil
}

// kubeletArgs are the kubelet's flags that register it with the API
// server.
func (c *cluster) kubeletArgs() []string { return []string{"--kubeconfig", c.kubeconfig} }

// kubeletConfig is the kubelet configuration's part for the cluster: the
// DNS address pods are given.
func (c *cluster) kubeletConfig() string {
	return fmt.Sprintf("clusterDNS: [%s]\nclusterDomain: cluster.local\n", clusterDNS)
}

// startControllers starts the controller manager and the scheduler once
// the kubelet runs, and waits for the node to be Ready and for the default
// namespace's service account (which every pod of the API mounts).
func (n *node) startControllers(cp builds.ControlPlane) error {
	c, p := n.cluster, n.cluster.path
	var err error
	c.controller, err = n.daemon("kube-controller-manager", cp.ControllerManager,
		"--kubeconfig", c.kubeconfig, "--leader-elect=false", "--bind-address", "127.0.0.1",
		"--service-account-private-key-file", p("sa.key"), "--root-ca-file", p("ca.crt"),
		"--profiling=false", "-v", "1")
	if err != nil {
		return err
	}
	c.scheduler, err = n.daemon("kube-scheduler", cp.Scheduler,
		"--kubeconfig", c.kubeconfig, "--leader-elect=false", "--bind-address", "127.0.0.1",
		"--profiling=false", "-v", "1")
	if err != nil {
		return err
	}
	ctx := context.Background()
	if err := proctest.Poll(120*time.Second, func() error {
		node, err := c.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		// Ready, and so untainted by the node lifecycle controller: else
		// the first pods wait for the scheduler's retry.
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue && len(node.Spec.Taints) == 0 {
				return nil
			}
		}
		return fmt.Errorf("node %s is not Ready and untainted: %v", nodeName, node.Spec.Taints)
	}); err != nil {
		return err
	}
	return proctest.Poll(60*time.Second, func() error {
		_, err := c.client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// stopControllers stops the controllers and the scheduler, so that no pod
// is made again, and deletes every pod of the API at once: the node's
// teardown waits for the runtime to have none running.
func (n *node) stopControllers() error {
	c := n.cluster
	errs := []error{stopProcess(c.controller, 10*time.Second), stopProcess(c.scheduler, 10*time.Second)}
	if c.client != nil && c.apiserver != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		now := int64(0)
		nss, err := c.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, ns := range nss.Items {
				err := c.client.CoreV1().Pods(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &now}, metav1.ListOptions{})
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// stopAPIServer stops the API server and etcd, after the kubelet, and the
// DNS responder.
func (n *node) stopAPIServer() error {
	c := n.cluster
	errs := []error{stopProcess(c.apiserver, 10*time.Second), stopProcess(c.etcd, 10*time.Second)}
	if c.dns != nil {
		errs = append(errs, c.dns.Close())
	}
	return errors.Join(errs...)
}
