package deploytest

import (
	"os"
	"testing"

	"sigs.k8s.io/yaml"
)

// decodeFile decodes a one-document YAML file strictly into v.
func decodeFile(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(raw, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
