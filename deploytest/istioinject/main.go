// Command istioinject is istiod's sidecar injector at one Istio release:
// the istio.io/istio its go.mod names. Each go.1.NN.mod beside go.mod names
// an older release, and
//
//	go build -modfile=go.1.30.mod .
//
// builds it from that one's charts and code. deploytest runs every Istio
// test through it, once per release, so that the injection template is
// proved against the injector of each Istio a user may run.
//
//	istioinject render VALUES [SET...] > CONFIG
//
// renders istiod's charts, as istioctl install does, with the Helm values
// of the YAML file VALUES (an IstioOperator's spec.values) and each SET, a
// path=value as istioctl's --set takes, and writes what the injector reads
// from the cluster: the
// istio-sidecar-injector ConfigMap's config and values and the istio
// ConfigMap's mesh, as one JSON object. It fails when they do not parse.
//
//	istioinject inject CONFIG < IN > OUT
//
// injects the YAML IN with the rendered CONFIG, as istioctl kube-inject
// does (inject.IntoResourceFile).
//
//	istioinject file PATH
//
// prints PATH from Istio's embedded manifests (charts/...), for tests that
// compare the template with Istio's own.
//
// An error goes to stderr (Istio's own render and template errors may span
// lines), and the exit status is 1 (2 for a bad command line).
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	meshconfig "istio.io/api/mesh/v1alpha1"
	"istio.io/istio/manifests"
	"istio.io/istio/operator/pkg/render"
	"istio.io/istio/pkg/config/mesh"
	"istio.io/istio/pkg/kube/inject"
	"sigs.k8s.io/yaml"
)

// config is what istiod's injector reads from its two ConfigMaps.
type config struct {
	Config string `json:"config"` // istio-sidecar-injector: config (the templates)
	Values string `json:"values"` // istio-sidecar-injector: values
	Mesh   string `json:"mesh"`   // istio: mesh
}

const usage = "usage: istioinject render VALUES [SET...] | inject CONFIG | file PATH"

func main() {
	if len(os.Args) < 3 {
		fail(2, errors.New(usage))
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; {
	case cmd == "render":
		err = renderCharts(args[0], args[1:], os.Stdout)
	case cmd == "inject" && len(args) == 1:
		err = injectYAML(args[0], os.Stdin, os.Stdout)
	case cmd == "file" && len(args) == 1:
		var b []byte
		if b, err = fs.ReadFile(manifests.BuiltinOrDir(""), args[0]); err == nil {
			_, err = os.Stdout.Write(b)
		}
	default:
		fail(2, errors.New(usage))
	}
	if err != nil {
		fail(1, err)
	}
}

func fail(code int, err error) {
	fmt.Fprintln(os.Stderr, "istioinject:", err)
	os.Exit(code)
}

// renderCharts renders istiod alone (profile empty, pilot on) with the
// values file and set flags, and writes its injector's config as JSON.
func renderCharts(valuesFile string, set []string, w io.Writer) error {
	raw, err := os.ReadFile(valuesFile)
	if err != nil {
		return err
	}
	var values map[string]any
	if err := yaml.UnmarshalStrict(raw, &values); err != nil {
		return fmt.Errorf("%s: %w", valuesFile, err)
	}
	iop, err := yaml.Marshal(map[string]any{
		"apiVersion": "install.istio.io/v1alpha1",
		"kind":       "IstioOperator",
		"spec":       map[string]any{"values": values},
	})
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "istioinject-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "iop.yaml")
	if err := os.WriteFile(file, iop, 0o644); err != nil {
		return err
	}
	sets, _, err := render.GenerateManifest([]string{file}, append([]string{"profile=empty", "components.pilot.enabled=true"}, set...), false, nil, nil)
	if err != nil {
		return fmt.Errorf("render istiod's charts with %s: %w", valuesFile, err)
	}
	var c config
	for _, s := range sets {
		for _, m := range s.Manifests {
			if m.GetKind() != "ConfigMap" {
				continue
			}
			data, _ := m.Object["data"].(map[string]any)
			switch m.GetName() {
			case "istio-sidecar-injector":
				c.Config, _ = data["config"].(string)
				c.Values, _ = data["values"].(string)
			case "istio":
				c.Mesh, _ = data["mesh"].(string)
			}
		}
	}
	if c.Config == "" || c.Mesh == "" {
		return errors.New("istiod's charts rendered no istio-sidecar-injector config or no mesh config")
	}
	if _, _, _, err := c.parse(); err != nil {
		return err
	}
	return json.NewEncoder(w).Encode(c)
}

// parse reads the config as istiod does.
func (c config) parse() (inject.Templates, inject.ValuesConfig, *meshconfig.MeshConfig, error) {
	cfg, err := inject.UnmarshalConfig([]byte(c.Config))
	if err != nil {
		return nil, inject.ValuesConfig{}, nil, fmt.Errorf("injection config: %w", err)
	}
	values, err := inject.NewValuesConfig(c.Values)
	if err != nil {
		return nil, inject.ValuesConfig{}, nil, fmt.Errorf("injection values: %w", err)
	}
	m, err := mesh.ApplyMeshConfig(c.Mesh, mesh.DefaultMeshConfig())
	if err != nil {
		return nil, inject.ValuesConfig{}, nil, fmt.Errorf("mesh config: %w", err)
	}
	return cfg.Templates, values, m, nil
}

// injectYAML runs Istio's injector with the rendered config file on in.
func injectYAML(configFile string, in io.Reader, w io.Writer) error {
	raw, err := os.ReadFile(configFile)
	if err != nil {
		return err
	}
	var c config
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("%s: %w", configFile, err)
	}
	templates, values, m, err := c.parse()
	if err != nil {
		return fmt.Errorf("%s: %w", configFile, err)
	}
	var out bytes.Buffer
	if err := inject.IntoResourceFile(nil, templates, values, "", m, in, &out, func(string) {}); err != nil {
		return err
	}
	_, err = w.Write(bytes.TrimSuffix(out.Bytes(), []byte("---\n")))
	return err
}
