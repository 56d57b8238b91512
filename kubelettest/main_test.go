package kubelettest

import (
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/testing/proctest"
	"github.com/proxy-supervisor/proxy-supervisor/kubelettest/internal/builds"
)

// theNode is the node every test's pods run on: starting containerd and a
// kubelet takes seconds, a pod's run as long, so the tests share it and run
// in parallel.
var theNode *node

// theControlPlane is the cluster mode's control plane, or why there is
// none: the cluster scenarios alone skip without it.
var theControlPlane builds.ControlPlane

// theAgent is the real pilot-agent that the Istio scenarios run, or why
// there is none: they alone skip without it.
var theAgent pilotAgent

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	if missing := builds.Missing(); len(missing) > 0 {
		fmt.Printf("kubelettest: SKIPPED, the real-kubelet suite is missing: %s\n", strings.Join(missing, "; "))
		if os.Getenv("CI") == "true" {
			fmt.Println("kubelettest: CI=true, so the skip fails the suite")
			return 1
		}
		return 0
	}
	start := time.Now()
	var err error
	if theVersion, err = builds.Version(); err != nil {
		fmt.Println("kubelettest:", err)
		return 1
	}
	kubelet, err := builds.Kubelet()
	if err != nil {
		fmt.Println("kubelettest:", err)
		return 1
	}
	theControlPlane = builds.BuildControlPlane()
	if theControlPlane.Missing != "" {
		fmt.Printf("kubelettest: the cluster scenarios will be SKIPPED (failed under CI=true): %s\n", theControlPlane.Missing)
	}
	theAgent = buildPilotAgent()
	if theAgent.missing != "" {
		fmt.Printf("kubelettest: the pilot-agent scenarios will be SKIPPED (failed under CI=true): %s\n", theAgent.missing)
	}
	images, err := buildImages(theAgent)
	if err != nil {
		fmt.Println("kubelettest:", err)
		return 1
	}
	defer os.RemoveAll(filepath.Dir(images[0]))
	// Made before the node, so removed after it.
	releaseDir, err := os.MkdirTemp("", fmt.Sprintf("kubelettest-release-%d-", os.Getpid()))
	if err != nil {
		fmt.Println("kubelettest:", err)
		return 1
	}
	defer os.RemoveAll(releaseDir)
	fmt.Printf("kubelettest: kubelet and images ready in %s\n", time.Since(start).Round(100*time.Millisecond))
	n, err := startNode(kubelet, images, theControlPlane)
	if err != nil {
		fmt.Println("kubelettest: starting the node:", err)
		return 1
	}
	mode := "standalone"
	if n.cluster != nil {
		mode = "registered with the API server"
	}
	fmt.Printf("kubelettest: node up, %s, in %s (%s)\n", mode, time.Since(start).Round(100*time.Millisecond), n.dir)
	// An interrupted run still tears the node down.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sigs
		fmt.Println("kubelettest: interrupted, stopping the node")
		n.stop() //nolint:errcheck
		os.Exit(1)
	}()
	if n.cluster != nil {
		theRelease = makeRelease(n, releaseDir)
	} else {
		theRelease.missing = "no control plane: " + theControlPlane.Missing
	}
	if theRelease.missing != "" {
		fmt.Printf("kubelettest: TestClusterHelm will be SKIPPED (failed under CI=true): %s\n", theRelease.missing)
	}
	theNode = n
	code := m.Run()
	signal.Stop(sigs)
	stopping := time.Now()
	if err := n.stop(); err != nil {
		fmt.Println("kubelettest: teardown:", err)
		code = 1
	}
	fmt.Printf("kubelettest: node torn down in %s\n", time.Since(stopping).Round(100*time.Millisecond))
	theReport.print(os.Stdout)
	return code
}

// buildImages builds the static binaries and writes the node's images as
// OCI archives: the pause image, the client image of the manifests, the
// proxy image (the supervisor and the fake Envoy), the app image and, when
// pilot-agent built, the Istio image.
func buildImages(agent pilotAgent) ([]string, error) {
	dir, err := os.MkdirTemp("", fmt.Sprintf("kubelettest-images-%d-", os.Getpid()))
	if err != nil {
		return nil, err
	}
	bin := func(name string) string { return filepath.Join(dir, name) }
	for _, pkg := range []string{proctest.Supervisor, proctest.FakeEnvoy} {
		if err := proctest.Static(pkg, bin(path.Base(pkg))); err != nil {
			return nil, err
		}
	}
	for _, name := range []string{"podapp", "pause"} {
		if err := proctest.GoBuild(".", bin(name), "./cmd/"+name); err != nil {
			return nil, err
		}
	}
	// podapp, for hooks that wait before they run (podapp's exec step);
	// the fake also where Envoy's image has envoy, and the binary where
	// images/envoy.Dockerfile adds it: the one-container native sidecar
	// (the native manifest's, the admission policy's) runs them there.
	// envoyBase is Envoy's image to envoy.Dockerfile.
	baseFiles := []imageFile{{bin("fake-envoy"), "fake-envoy"}, {bin("podapp"), "podapp"}, {bin("fake-envoy"), "usr/local/bin/envoy"}}
	envoyFiles := append([]imageFile{{bin("proxy-supervisor"), "proxy-supervisor"}, {bin("proxy-supervisor"), "usr/local/bin/proxy-supervisor"}}, baseFiles...)
	images := []image{
		{pauseImage, []imageFile{{bin("pause"), "pause"}}, []string{"/pause"}},
		{clientImage, []imageFile{{bin("proxy-supervisor"), "proxy-supervisor"}}, []string{"/proxy-supervisor"}},
		{envoyImage, envoyFiles, []string{"/proxy-supervisor"}},
		// Made here in case buildah cannot build it from images/.
		{shippedEnvoyImage, envoyFiles, []string{"/usr/local/bin/envoy"}},
		{appImage, []imageFile{{bin("podapp"), "podapp"}}, []string{"/podapp"}},
	}
	// What the shipped images are built from: the binary, and the Envoy
	// and Istio images without it.
	base := istioBase
	images = append(images, image{binaryImage, []imageFile{{bin("proxy-supervisor"), "out/proxy-supervisor"}}, nil},
		image{envoyBase, baseFiles, []string{"/usr/local/bin/envoy"}})
	if agent.missing == "" {
		files, err := istioFiles(dir, bin, agent)
		if err != nil {
			return nil, err
		}
		images = append(images, image{istioImage, files, []string{"/usr/local/bin/pilot-agent"}})
		alone := slices.DeleteFunc(slices.Clone(files), func(f imageFile) bool { return f.dst == "usr/local/bin/proxy-supervisor" })
		images = append(images, image{base, alone, []string{"/usr/local/bin/pilot-agent"}})
	}
	tars := map[string]string{}
	for i, img := range images {
		out := filepath.Join(dir, fmt.Sprintf("image%d.tar", i))
		if err := writeImage(out, img.name, img.files, img.entry); err != nil {
			return nil, err
		}
		tars[img.name] = out
	}
	// The client, Envoy and Istio images as users build them, where
	// buildah is; else the ones made here.
	shipped, err := buildShipped(dir, tars[binaryImage], tars[envoyBase], tars[base])
	if err != nil {
		theShipped = err.Error()
		fmt.Printf("kubelettest: the shipped images were not built, TestShippedImages will be SKIPPED (failed under CI=true): %s\n", theShipped)
	}
	maps.Copy(tars, shipped)
	delete(tars, binaryImage)
	delete(tars, envoyBase)
	// The Istio base stays: it is the unchanged proxyv2 that
	// istio/job-override.yaml's istio-proxy runs, the binary coming from
	// the client image.
	return slices.Sorted(maps.Values(tars)), nil
}

// image is an image's name, its files and its entrypoint.
type image struct {
	name  string
	files []imageFile
	entry []string
}
