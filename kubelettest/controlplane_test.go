package kubelettest

import (
	"os"
	"testing"
)

// needCluster skips a test that needs the API server when the node has
// none, and fails it under CI=true, as the suite's own skip does.
func needCluster(t *testing.T) *cluster {
	t.Helper()
	if c := theNode.cluster; c != nil {
		return c
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("kubelettest: no control plane (%s); CI=true, so this fails", theControlPlane.Missing)
	}
	t.Skipf("kubelettest: SKIPPED, no control plane: %s", theControlPlane.Missing)
	return nil
}
