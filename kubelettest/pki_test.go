package kubelettest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
)

// path is a file of the cluster's certificates directory.
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
