package deploytest

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/proxy-supervisor/proxy-supervisor/deploytest/seqsvg"
)

// The committed diagram is what its source renders to.
func TestLifecycleDiagram(t *testing.T) {
	src, err := os.Open(root + "/docs/lifecycle.seq")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	want, err := seqsvg.Render(src)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(root + "/docs/lifecycle.svg")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("docs/lifecycle.svg does not match docs/lifecycle.seq: run make docs")
	}
}

func TestSeqsvgErrors(t *testing.T) {
	for src, want := range map[string]string{
		"":                               "no lanes",
		"lane a A\nmsg a b x\n":          `no lane "b"`,
		"lane a A\nlane a B\n":           `lane "a" twice`,
		"lane a A\nmsg a a x\n":          "to itself",
		"lane a A\nfrobnicate a\n":       "cannot read",
		"lane a A\nnote a \"x\" extra\n": "cannot read",
		"lane a \"A\nnote a x\n":         "quote",
	} {
		_, err := seqsvg.Render(strings.NewReader(src))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error with %q", src, err, want)
		}
	}
}
