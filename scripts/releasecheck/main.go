// Command releasecheck checks what make release built (scripts/release.sh
// runs it), so that a release whose SBOM leaves out a module or whose image
// says the wrong version fails before anything is published:
//
//	releasecheck sbom BINARY SPDX CYCLONEDX
//	releasecheck index REGISTRY REPO DIGEST VERSION COMMIT BASE PLATFORM...
//
// sbom reads the Go build information in BINARY and fails unless both
// SBOMs (syft's SPDX 2.3 JSON and CycloneDX JSON) name the main module and
// every module linked into it, at its version.
//
// index reads the image index REPO@DIGEST from the registry REGISTRY
// (host:port, plain HTTP: the release's own, on loopback) and fails unless
// it holds exactly one image for each PLATFORM (os/arch), each with the
// OCI labels of this build (version, revision, licence, source, creation
// time) and, unless BASE is -, the base's name pinned at the digest BASE
// (org.opencontainers.image.base.name ending in @BASE). It prints
// each platform's manifest digest, one "PLATFORM DIGEST" line each, for
// the SBOMs and attestations that follow.
package main

import (
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "releasecheck:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	switch {
	case len(args) == 4 && args[0] == "sbom":
		return checkSBOMs(args[1], args[2], args[3])
	case len(args) >= 8 && args[0] == "index":
		return checkIndex(out, args[1], args[2], args[3], args[4], args[5], args[6], args[7:])
	}
	return errUsage
}

var errUsage = errors.New("usage: releasecheck sbom BINARY SPDX CYCLONEDX | index REGISTRY REPO DIGEST VERSION COMMIT BASE PLATFORM...")

// module is a Go module as an SBOM names it.
type module struct{ path, version string }

func (m module) purl() string { return "pkg:golang/" + m.path + "@" + m.version }

// modules is what the binary's build information says is linked into it:
// the main module (at its version when the build knew it) and every
// dependency, replacements resolved.
func modules(binary string) ([]module, error) {
	bi, err := buildinfo.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	mods := []module{{bi.Main.Path, bi.Main.Version}}
	for _, d := range bi.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		mods = append(mods, module{d.Path, d.Version})
	}
	return mods, nil
}

func checkSBOMs(binary, spdxPath, cdxPath string) error {
	mods, err := modules(binary)
	if err != nil {
		return err
	}
	var spdx struct {
		SPDXVersion string `json:"spdxVersion"`
		Packages    []struct {
			Name         string `json:"name"`
			VersionInfo  string `json:"versionInfo"`
			ExternalRefs []struct {
				Locator string `json:"referenceLocator"`
			} `json:"externalRefs"`
		} `json:"packages"`
	}
	if err := readJSON(spdxPath, &spdx); err != nil {
		return err
	}
	if !strings.HasPrefix(spdx.SPDXVersion, "SPDX-2.") {
		return fmt.Errorf("%s: spdxVersion %q, want SPDX 2.x", spdxPath, spdx.SPDXVersion)
	}
	var inSPDX []string
	for _, p := range spdx.Packages {
		for _, r := range p.ExternalRefs {
			inSPDX = append(inSPDX, r.Locator)
		}
	}
	var cdx struct {
		BOMFormat  string `json:"bomFormat"`
		Components []struct {
			PURL string `json:"purl"`
		} `json:"components"`
	}
	if err := readJSON(cdxPath, &cdx); err != nil {
		return err
	}
	if cdx.BOMFormat != "CycloneDX" {
		return fmt.Errorf("%s: bomFormat %q, want CycloneDX", cdxPath, cdx.BOMFormat)
	}
	var inCDX []string
	for _, c := range cdx.Components {
		inCDX = append(inCDX, c.PURL)
	}
	for _, m := range mods {
		if !slices.ContainsFunc(inSPDX, func(s string) bool { return samePURL(s, m) }) {
			return fmt.Errorf("%s: no package for %s, which %s links", spdxPath, m.purl(), binary)
		}
		if !slices.ContainsFunc(inCDX, func(s string) bool { return samePURL(s, m) }) {
			return fmt.Errorf("%s: no component for %s, which %s links", cdxPath, m.purl(), binary)
		}
	}
	return nil
}

// samePURL reports whether purl names m. A purl is percent-encoded where
// a module path and version are not (a / in a namespace, the + of a
// version's build metadata), and a qualifier may follow; the main module of a build without a version (devel) is named
// at whatever version the SBOM gives it.
func samePURL(purl string, m module) bool {
	purl, _, _ = strings.Cut(purl, "?")
	if u, err := url.PathUnescape(purl); err == nil {
		purl = u
	}
	if m.version == "" || m.version == "(devel)" {
		name, _, _ := strings.Cut(purl, "@")
		return name == "pkg:golang/"+m.path
	}
	return strings.EqualFold(purl, m.purl())
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// The media types a registry serves an OCI image index and manifest as,
// and Docker's, which a build may push.
const accept = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, " +
	"application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.docker.distribution.manifest.v2+json"

var client = &http.Client{Timeout: 30 * time.Second}

func fetch(registry, repo, kind, ref string, v any) error {
	req, err := http.NewRequest(http.MethodGet, "http://"+registry+"/v2/"+repo+"/"+kind+"/"+ref, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", accept)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s/%s: %s", kind, repo, ref, resp.Status)
	}
	return json.Unmarshal(body, v)
}

func checkIndex(out io.Writer, registry, repo, digest, version, commit, base string, platforms []string) error {
	var index struct {
		MediaType string `json:"mediaType"`
		Manifests []struct {
			Digest   string `json:"digest"`
			Platform struct {
				OS           string `json:"os"`
				Architecture string `json:"architecture"`
			} `json:"platform"`
		} `json:"manifests"`
	}
	if err := fetch(registry, repo, "manifests", digest, &index); err != nil {
		return err
	}
	if len(index.Manifests) == 0 {
		return fmt.Errorf("%s@%s is not an image index (media type %q)", repo, digest, index.MediaType)
	}
	seen := map[string]string{}
	for _, m := range index.Manifests {
		p := m.Platform.OS + "/" + m.Platform.Architecture
		if _, dup := seen[p]; dup {
			return fmt.Errorf("%s@%s: two images for %s", repo, digest, p)
		}
		seen[p] = m.Digest
		if err := checkImage(registry, repo, m.Digest, p, version, commit, base); err != nil {
			return err
		}
	}
	for _, p := range platforms {
		d, ok := seen[p]
		if !ok {
			return fmt.Errorf("%s@%s: no image for %s", repo, digest, p)
		}
		fmt.Fprintln(out, p, d)
	}
	if len(seen) != len(platforms) {
		return fmt.Errorf("%s@%s: %d images, want %d (%s)", repo, digest, len(seen), len(platforms), strings.Join(platforms, " "))
	}
	return nil
}

func checkImage(registry, repo, digest, platform, version, commit, base string) error {
	var manifest struct {
		Config struct {
			Digest string `json:"digest"`
		} `json:"config"`
	}
	if err := fetch(registry, repo, "manifests", digest, &manifest); err != nil {
		return err
	}
	var config struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
		Config       struct {
			Labels map[string]string `json:"Labels"`
		} `json:"config"`
	}
	if err := fetch(registry, repo, "blobs", manifest.Config.Digest, &config); err != nil {
		return err
	}
	where := repo + "@" + digest
	if got := config.OS + "/" + config.Architecture; got != platform {
		return fmt.Errorf("%s: its config says %s, its index %s", where, got, platform)
	}
	l := config.Config.Labels
	want := map[string]string{
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": commit,
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.source":   "https://github.com/proxy-supervisor/proxy-supervisor",
	}
	for k, v := range want {
		if l[k] != v {
			return fmt.Errorf("%s: label %s is %q, want %q", where, k, l[k], v)
		}
	}
	if _, err := time.Parse(time.RFC3339, l["org.opencontainers.image.created"]); err != nil {
		return fmt.Errorf("%s: label org.opencontainers.image.created: %v", where, err)
	}
	if base == "-" {
		return nil
	}
	if name := l["org.opencontainers.image.base.name"]; !strings.HasSuffix(name, "@"+base) {
		return fmt.Errorf("%s: its base %q is not pinned at %s", where, name, base)
	}
	return nil
}
