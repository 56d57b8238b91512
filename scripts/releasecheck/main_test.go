package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSamePURL(t *testing.T) {
	for _, tt := range []struct {
		purl string
		m    module
		want bool
	}{
		{"pkg:golang/github.com/oklog/run@v1.2.0", module{"github.com/oklog/run", "v1.2.0"}, true},
		{"pkg:golang/github.com%2Foklog%2Frun@v1.2.0?type=module", module{"github.com/oklog/run", "v1.2.0"}, true},
		{"pkg:golang/example.com/m@v0.0.0-20261202145933-783b30a8add9%2Bdirty", module{"example.com/m", "v0.0.0-20261202145933-783b30a8add9+dirty"}, true},
		{"pkg:golang/github.com/oklog/run@v1.1.0", module{"github.com/oklog/run", "v1.2.0"}, false},
		{"pkg:golang/github.com/oklog/run2@v1.2.0", module{"github.com/oklog/run", "v1.2.0"}, false},
		{"pkg:golang/example.com/main@v0.0.0-20261202-abc", module{"example.com/main", "(devel)"}, true},
		{"pkg:golang/example.com/other@v1.0.0", module{"example.com/main", ""}, false},
	} {
		if got := samePURL(tt.purl, tt.m); got != tt.want {
			t.Errorf("samePURL(%q, %v) = %v, want %v", tt.purl, tt.m, got, tt.want)
		}
	}
}

// An SBOM that leaves out a module the binary links fails the check; one
// that names them all passes. The binary is this test's own.
func TestCheckSBOMs(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	mods, err := modules(bin)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var refs, comps []string
	for _, m := range mods {
		v := m.version
		if v == "" || v == "(devel)" {
			v = "v0.0.0"
		}
		refs = append(refs, `{"name":"`+m.path+`","externalRefs":[{"referenceLocator":"pkg:golang/`+m.path+`@`+v+`"}]}`)
		comps = append(comps, `{"purl":"pkg:golang/`+m.path+`@`+v+`"}`)
	}
	spdx := write("all.spdx.json", `{"spdxVersion":"SPDX-2.3","packages":[`+strings.Join(refs, ",")+`]}`)
	cdx := write("all.cdx.json", `{"bomFormat":"CycloneDX","components":[`+strings.Join(comps, ",")+`]}`)
	if err := checkSBOMs(bin, spdx, cdx); err != nil {
		t.Fatalf("every module named: %v", err)
	}
	noMain := write("none.spdx.json", `{"spdxVersion":"SPDX-2.3","packages":[]}`)
	if err := checkSBOMs(bin, noMain, cdx); err == nil || !strings.Contains(err.Error(), mods[0].path) {
		t.Errorf("an SPDX SBOM without %s: %v, want it named", mods[0].path, err)
	}
	notCDX := write("bad.cdx.json", `{"bomFormat":"SPDX","components":[]}`)
	if err := checkSBOMs(bin, spdx, notCDX); err == nil || !strings.Contains(err.Error(), "CycloneDX") {
		t.Errorf("a CycloneDX file of another format: %v, want refused", err)
	}
}
