// Command kubelet-builds builds the kubelet, the control plane and the
// release tools into the user's cache and fetches etcd, as the suite's
// start would (internal/builds), and ends: make test runs it in the background from its start,
// beside the stages that compile other things, so that the suite finds
// them built. Where the suite would skip, it builds nothing. It runs from
// kubelettest/ (go run ./cmd/kubelet-builds); under CI=true a control
// plane or tools that did not build fail it, as they fail the suite.
package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/kubelettest/internal/builds"
)

func main() {
	if missing := builds.Missing(); len(missing) > 0 {
		fmt.Printf("kubelettest: nothing built, the suite will skip: it is missing %s\n", strings.Join(missing, "; "))
		return
	}
	start := time.Now()
	if _, err := builds.Kubelet(); err != nil {
		fmt.Println("kubelettest:", err)
		os.Exit(1)
	}
	cp := builds.BuildControlPlane()
	if cp.Missing != "" {
		fmt.Printf("kubelettest: the cluster scenarios will be SKIPPED (failed under CI=true): %s\n", cp.Missing)
		if os.Getenv("CI") == "true" {
			os.Exit(1)
		}
	} else if _, err := builds.Tools(); err != nil {
		// The cluster mode's make release runs them (release_test.go).
		fmt.Printf("kubelettest: TestClusterHelm will be SKIPPED (failed under CI=true): %v\n", err)
		if os.Getenv("CI") == "true" {
			os.Exit(1)
		}
	}
	fmt.Printf("kubelettest: the kubelet, the control plane and the release tools ready in %s\n", time.Since(start).Round(100*time.Millisecond))
}
