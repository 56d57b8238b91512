package deploytest

import (
	"os"
	"testing"

	"sigs.k8s.io/yaml"
)

// decodeFile decodes a one-document YAML file strictly into v.
func decodeFile(t *testing.T, path string, v any) {
	t.Helper()
	decodeWith(t, path, v, func(raw []byte, v any) error { return yaml.UnmarshalStrict(raw, v) })
}

// decodeFileLoose decodes a YAML file into v, ignoring the fields v lacks.
func decodeFileLoose(t *testing.T, path string, v any) {
	t.Helper()
	decodeWith(t, path, v, func(raw []byte, v any) error { return yaml.Unmarshal(raw, v) })
}

func decodeWith(t *testing.T, path string, v any, unmarshal func([]byte, any) error) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
