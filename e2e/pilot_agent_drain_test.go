package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// pilotAgent is a pilot-agent that scripts/pilot-agent.sh built before,
// and Istio's bootstrap template beside it; "" when there is none. It is
// not built here: a cold build takes a minute and the module proxy.
func pilotAgent() (bin, template string) {
	bins := []string{os.Getenv("PS_PILOT_AGENT")}
	if home, err := os.UserCacheDir(); err == nil {
		found, _ := filepath.Glob(filepath.Join(home, "proxy-supervisor-pilot-agent", "*", "pilot-agent"))
		bins = append(bins, found...)
	}
	for _, b := range bins {
		tmpl := filepath.Join(filepath.Dir(b), "envoy_bootstrap_tmpl.json")
		if _, err := os.Stat(tmpl); b != "" && err == nil {
			return b, tmpl
		}
	}
	return "", ""
}

// needPilotAgent is pilotAgent, or the test's skip (its failure under CI:
// make test builds it first).
func needPilotAgent(t *testing.T) (bin, template string) {
	t.Helper()
	bin, template = pilotAgent()
	if bin == "" {
		skip := t.Skipf
		if os.Getenv("CI") == "true" {
			skip = t.Fatalf
		}
		skip("no pilot-agent built by scripts/pilot-agent.sh (or PS_PILOT_AGENT)")
	}
	return bin, template
}

// The checks of TestDrainPerEnvoyVersion against pilot-agent's own drain,
// pilot-agent as PID 1 running the fake (Istio's bootstrap from -c merged
// with the sidecar's listeners): on SIGTERM it POSTs
// drain_listeners?inboundonly&graceful, waits terminationDrainDuration and
// kills Envoy. Where it differs from the supervisor's drain is what this
// asserts, as docs/reference.md records it: before 1.34 the app's outbound
// keep-alive is told to close; without skip_exit a new inbound connection
// is refused once --drain-time-s has passed; and the proxy goes at the end
// of terminationDrainDuration while the app still listens.
func TestPilotAgentDrainPerEnvoyVersion(t *testing.T) {
	t.Parallel()
	agent, tmpl := needPilotAgent(t)
	cert := rootCertPEM(t)
	for _, tt := range []struct {
		version        string
		outboundHinted bool
	}{
		{"1.31", true}, // envoy#35020
		{"1.36", false},
	} {
		t.Run(tt.version, func(t *testing.T) {
			t.Parallel()
			p := newPod(t)
			env, argv := agentCommand(t, p, agent, tmpl, cert, "--fake-version "+tt.version)
			pa := p.start("pilot-agent", true, env, argv...)
			app := p.serveHTTP("127.0.0.1:8080", "app")
			p.serveHTTP("127.0.0.1:8081", "svc")
			p.waitHTTP("http://127.0.0.1:9000/", 200, soon)
			in, out := p.keepAlive(t, "127.0.0.1:9000"), p.keepAlive(t, "127.0.0.1:9001")
			in.get()
			out.get()

			pa.Signal(syscall.SIGTERM)
			pa.WaitLog("Graceful termination period is", soon) // after its drain call
			time.Sleep(1500 * time.Millisecond)                // past --drain-time-s
			if _, closing := out.get(); closing != tt.outboundHinted {
				t.Errorf("the app's outbound keep-alive told to close = %v, want %v", closing, tt.outboundHinted)
			}
			if _, closing := in.get(); !closing {
				t.Error("the inbound keep-alive was not told to close")
			}
			if c, err := p.netns.Dial(t.Context(), "tcp", "127.0.0.1:9000"); err == nil {
				c.Close()
				t.Error("a new inbound connection after --drain-time-s was accepted; pilot-agent's drain has no skip_exit")
			}
			if !pa.Wait(soon) {
				t.Fatal("pilot-agent did not end")
			}
			if _, err := p.netns.Dial(t.Context(), "tcp", "127.0.0.1:8080"); err != nil {
				t.Fatalf("the app: %v", err)
			}
			app.Close() // still listening when the proxy went
		})
	}
}

// agentCommand is the environment and command line of pilot-agent running
// the fake Envoy with the sidecar's listeners and fakeFlags, in a working
// directory of its own under p's volume: pilot-agent reads its root
// certificate and writes its bootstrap there. drainDuration (Envoy's
// --drain-time-s) is 1s, terminationDrainDuration 4s.
func agentCommand(t *testing.T, p *pod, agent, tmpl string, cert []byte, fakeFlags string) (env, argv []string) {
	t.Helper()
	work := filepath.Join(p.dir, "agent")
	if err := os.MkdirAll(filepath.Join(work, "var/run/secrets/istio"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "var/run/secrets/istio/root-cert.pem"), cert, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.Marshal(map[string]string{
		"binaryPath": bin.envoy, "proxyBootstrapTemplatePath": tmpl, "configPath": filepath.Join(work, "proxy"),
		"drainDuration": "1s", "terminationDrainDuration": "4s",
	})
	// FAKE_ENVOY_FLAGS is split at spaces: the listeners go as JSON, which
	// is YAML, without any.
	env = []string{"PROXY_CONFIG=" + string(cfg), "POD_NAME=p", "POD_NAMESPACE=default", "INSTANCE_IP=127.0.0.1",
		"SERVICE_ACCOUNT=default", "FAKE_ENVOY_FLAGS=" + fakeFlags + " --config-yaml " + compactJSON(t, sidecarBootstrap)}
	return env, []string{"/bin/sh", "-c", `cd "$0" && exec "$@"`, work, agent, "proxy", "sidecar", "--domain", "default.svc.cluster.local"}
}

// compactJSON is the YAML document as JSON without a blank.
func compactJSON(t *testing.T, doc string) string {
	t.Helper()
	b, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(string(b), " \t\n") {
		t.Fatalf("the bootstrap has a blank inside a string: %s", b)
	}
	return string(b)
}

// rootCertPEM is a self-signed CA certificate: pilot-agent only dials the
// (missing) istiod with it.
func rootCertPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "e2e root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
