package kubelettest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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
func (n *node) startAPIServer(cp controlPlane) error {
	c := n.cluster
	if err := c.writePKI(); err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	if out, err := n.nsenter(context.Background(), "ip", "addr", "add", clusterDNS+"/32", "dev", "lo").CombinedOutput(); err != nil {
		return fmt.Errorf("the cluster DNS address: %v: %s", err, out)
	}
	var err error
	if c.dns, err = n.listenPacket("udp", clusterDNS+":53"); err != nil {
		return fmt.Errorf("the cluster DNS responder: %w", err)
	}
	go serveNXDOMAIN(c.dns)
	c.etcd, err = n.daemon("etcd", cp.etcd, "--name", "kubelettest", "--data-dir", "/var/lib/etcd",
		"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "kubelettest=http://127.0.0.1:2380")
	if err != nil {
		return err
	}
	p := c.path
	c.apiserver, err = n.daemon("kube-apiserver", cp.apiserver,
		"--etcd-servers", "http://127.0.0.1:2379",
		"--bind-address", "0.0.0.0", "--secure-port", "6443", "--advertise-address", nodeIP,
		"--service-cluster-ip-range", serviceRange,
		"--tls-cert-file", p("apiserver.crt"), "--tls-private-key-file", p("apiserver.key"),
		"--client-ca-file", p("ca.crt"),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", p("sa.pub"), "--service-account-signing-key-file", p("sa.key"),
		// One user, the suite's: its certificate is in system:masters.
		"--authorization-mode", "AlwaysAllow",
		"--profiling=false", "-v", "1")
	if err != nil {
		return err
	}
	cfg := &rest.Config{
		Host: "https://" + apiServer,
		TLSClientConfig: rest.TLSClientConfig{
			CAFile: p("ca.crt"), CertFile: p("admin.crt"), KeyFile: p("admin.key"),
		},
		Dial:    n.dial,
		QPS:     50,
		Burst:   100,
		Timeout: 30 * time.Second,
	}
	if c.client, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if err := poll(120*time.Second, func() error {
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
func (n *node) startControllers(cp controlPlane) error {
	c, p := n.cluster, n.cluster.path
	var err error
	c.controller, err = n.daemon("kube-controller-manager", cp.controllerManager,
		"--kubeconfig", c.kubeconfig, "--leader-elect=false", "--bind-address", "127.0.0.1",
		"--service-account-private-key-file", p("sa.key"), "--root-ca-file", p("ca.crt"),
		"--profiling=false", "-v", "1")
	if err != nil {
		return err
	}
	c.scheduler, err = n.daemon("kube-scheduler", cp.scheduler,
		"--kubeconfig", c.kubeconfig, "--leader-elect=false", "--bind-address", "127.0.0.1",
		"--profiling=false", "-v", "1")
	if err != nil {
		return err
	}
	ctx := context.Background()
	if err := poll(120*time.Second, func() error {
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
	return poll(60*time.Second, func() error {
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

func (c *cluster) path(name string) string { return filepath.Join(c.pki, name) }

// writePKI writes the cluster's certificates and keys: a CA, the API
// server's serving certificate, the one client certificate (the suite's,
// in system:masters, which every component and the kubelet use), the
// service accounts' signing key pair, and the kubeconfig.
func (c *cluster) writePKI() error {
	if err := os.MkdirAll(c.pki, 0o700); err != nil {
		return err
	}
	ca, caKey, caDER, err := newCA("kubelettest-ca")
	if err != nil {
		return err
	}
	if err := c.writePEM("ca.crt", "CERTIFICATE", caDER); err != nil {
		return err
	}
	serving := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(nodeIP), net.ParseIP("10.214.0.1")},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	admin := &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: "kubelettest", Organization: []string{"system:masters"}},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	for name, tmpl := range map[string]*x509.Certificate{"apiserver": serving, "admin": admin} {
		tmpl.NotBefore, tmpl.NotAfter = ca.NotBefore, ca.NotAfter
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		if err := c.writeKeyPair(name, tmpl, ca, caKey); err != nil {
			return err
		}
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	if err := c.writeKey("sa.key", saKey); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	if err := c.writePEM("sa.pub", "PUBLIC KEY", pub); err != nil {
		return err
	}
	c.kubeconfig = c.path("kubeconfig")
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kubelettest
  cluster: {server: "https://%s", certificate-authority: %q}
users:
- name: kubelettest
  user: {client-certificate: %q, client-key: %q}
contexts:
- name: kubelettest
  context: {cluster: kubelettest, user: kubelettest}
current-context: kubelettest
`, apiServer, c.path("ca.crt"), c.path("admin.crt"), c.path("admin.key"))
	return os.WriteFile(c.kubeconfig, []byte(kubeconfig), 0o600)
}

// writeKeyPair writes name.key and name.crt, signed by the CA.
func (c *cluster) writeKeyPair(name string, tmpl, ca *x509.Certificate, caKey *ecdsa.PrivateKey) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := c.writeKey(name+".key", key); err != nil {
		return err
	}
	return c.writePEM(name+".crt", "CERTIFICATE", der)
}

func (c *cluster) writeKey(name string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return c.writePEM(name, "EC PRIVATE KEY", der)
}

func (c *cluster) writePEM(name, typ string, der []byte) error {
	return os.WriteFile(c.path(name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// serveNXDOMAIN answers every DNS query on conn with NXDOMAIN (RFC 1035
// 4.1.1: the query's ID and question, QR set, RCODE 3), until conn is
// closed.
func serveNXDOMAIN(conn net.PacketConn) {
	buf := make([]byte, 512)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			return
		}
		q := buf[:n]
		if len(q) < 12 || q[2]&0x80 != 0 {
			continue // not a query
		}
		// The header and the first question: its name's labels, then type
		// and class.
		end := 12
		for end < len(q) && q[end] != 0 {
			end += 1 + int(q[end])
		}
		end += 5
		if end > len(q) {
			continue
		}
		resp := make([]byte, end)
		copy(resp, q[:end])
		resp[2] = 0x80 | q[2]&0x79 // QR, opcode, RD
		resp[3] = 0x80 | 3         // RA, NXDOMAIN
		resp[4], resp[5] = 0, 1    // one question
		clear(resp[6:12])          // no answer, authority or additional record
		conn.WriteTo(resp, from)   //nolint:errcheck // the client retries
	}
}

// The cluster DNS responder answers a lookup with NXDOMAIN, which a
// resolver takes as "no such host" at once, without a retry or a timeout.
func TestClusterDNSAnswersNXDOMAIN(t *testing.T) {
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	go serveNXDOMAIN(conn)
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", conn.LocalAddr().String())
	}}
	// The answer itself: the query's ID and question, QR, RD and RA set,
	// RCODE 3, no record.
	query := []byte{0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 1, 'a', 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 0, 0, 1, 0, 1}
	c, err := net.Dial("udp", conn.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	if _, err := c.Write(query); err != nil {
		t.Fatal(err)
	}
	resp := make([]byte, 512)
	n, err := c.Read(resp)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(query)
	want[2], want[3] = 0x81, 0x83
	if !bytes.Equal(resp[:n], want) {
		t.Fatalf("answer % x, want % x", resp[:n], want)
	}
	// And a resolver takes it as no such host at once.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err = r.LookupHost(ctx, "kubernetes.default.svc.cluster.local")
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Fatalf("lookup: %v, want no such host", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the answer took %s", took)
	}
}
