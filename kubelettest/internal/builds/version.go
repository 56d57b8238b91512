package builds

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// DefaultVersion is the Kubernetes that the suite builds unless told
// otherwise: kubelet/go.mod and controlplane/go.mod pin it.
const DefaultVersion = "v1.37.2"

// versionEnv names another Kubernetes release for the suite to build and
// run (K8S_VERSION=1.34.4 make test-kubelet): its modules are made in the
// cache from the module proxy (moduleDir).
const versionEnv = "K8S_VERSION"

var versionRE = regexp.MustCompile(`^v?(1)\.([0-9]+)\.([0-9]+)$`)

// Version is the Kubernetes release the suite builds and runs: K8S_VERSION
// when it is set, as vMAJOR.MINOR.PATCH, else DefaultVersion. A value not
// of that form is an error that names the variable.
func Version() (string, error) {
	v := os.Getenv(versionEnv)
	if v == "" {
		return DefaultVersion, nil
	}
	if !versionRE.MatchString(v) {
		return "", fmt.Errorf("%s=%q: want a Kubernetes release such as 1.34.4", versionEnv, v)
	}
	return "v" + strings.TrimPrefix(v, "v"), nil
}

// Minor is the minor release of Version (37 for v1.37.2), or 0 when
// K8S_VERSION is not valid: the scenarios that need a newer Kubernetes
// skip below theirs.
func Minor() int {
	v, err := Version()
	if err != nil {
		return 0
	}
	minor, _ := strconv.Atoi(versionRE.FindStringSubmatch(v)[2])
	return minor
}

// moduleDir is the directory of the module that pins name (kubelet or
// controlplane) at version v: the suite's own, relative to kubelettest/,
// for DefaultVersion; for another release, one made in the cache beside
// the builds, requiring k8s.io/kubernetes at v with each of its staging
// modules (the replace directives of its go.mod, checked out of the
// module proxy) replaced by its published v0.MINOR.PATCH, then tidied.
// Making one needs the module proxy; a made one is reused.
func moduleDir(cache, name, v string) (string, error) {
	if v == DefaultVersion {
		return name, nil
	}
	d := filepath.Join(cache, "modules-"+v, name)
	if _, err := os.Stat(filepath.Join(d, "go.sum")); err == nil {
		return d, nil
	}
	staging, err := stagingModules(v)
	if err != nil {
		return "", err
	}
	tools, err := os.ReadFile(filepath.Join(name, "tools.go"))
	if err != nil {
		return "", err
	}
	var mod strings.Builder
	fmt.Fprintf(&mod, "module github.com/proxy-supervisor/proxy-supervisor/kubelettest/%s\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n", name, v)
	published := "v0" + strings.TrimPrefix(v, "v1")
	for _, m := range staging {
		fmt.Fprintf(&mod, "\t%s => %s %s\n", m, m, published)
	}
	mod.WriteString(")\n")
	tmp := fmt.Sprintf("%s.tmp%d", d, os.Getpid()) // concurrent runs each make their own
	defer os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", err
	}
	for file, data := range map[string]string{"go.mod": mod.String(), "tools.go": string(tools)} {
		if err := os.WriteFile(filepath.Join(tmp, file), []byte(data), 0o644); err != nil {
			return "", err
		}
	}
	tidy := exec.Command("go", "mod", "tidy")
	tidy.Dir = tmp
	if out, err := tidy.CombinedOutput(); err != nil {
		return "", fmt.Errorf("the %s module at Kubernetes %s: go mod tidy: %v: %s", name, v, err, LastLine(string(out)))
	}
	if err := os.Rename(tmp, d); err != nil {
		// A concurrent run may have put its own there first.
		if _, statErr := os.Stat(filepath.Join(d, "go.sum")); statErr != nil {
			return "", err
		}
	}
	return d, nil
}

// stagingModules are the modules that k8s.io/kubernetes at v replaces by
// its own staging directories, as its go.mod lists them.
func stagingModules(v string) ([]string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", "k8s.io/kubernetes@"+v)
	cmd.Dir = os.TempDir()   // outside any module
	out, err := cmd.Output() // on failure, the JSON still says why in Error
	var info struct{ GoMod, Error string }
	if jerr := json.Unmarshal(out, &info); err != nil || jerr != nil || info.Error != "" {
		if info.Error != "" {
			err = errors.New(info.Error)
		}
		return nil, fmt.Errorf("k8s.io/kubernetes@%s from the module proxy: %w", v, errors.Join(err, jerr))
	}
	gomod, err := os.ReadFile(info.GoMod)
	if err != nil {
		return nil, err
	}
	var mods []string
	for _, m := range regexp.MustCompile(`(?m)^\s*(k8s\.io/[a-z0-9-]+)\s+=>\s+\./staging/`).FindAllStringSubmatch(string(gomod), -1) {
		mods = append(mods, m[1])
	}
	if len(mods) == 0 {
		return nil, fmt.Errorf("k8s.io/kubernetes@%s: its go.mod replaces no staging module", v)
	}
	return mods, nil
}
