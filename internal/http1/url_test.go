package http1

import (
	"errors"
	"testing"
)

// ParseURL is the one check of a URL the supervisor asks, its flags'
// too: a port it takes is one a Client can dial, a host a name or an
// address.
func TestParseURLIsTheOneCheck(t *testing.T) {
	for _, raw := range []string{
		"http://127.0.0.1:0", "http://127.0.0.1:99999", "http://127.0.0.1:", "http://127.0.0.1:http",
		"http://:15000", "http://a-:80", "http://a_b", "http://u:p@127.0.0.1", "http:opaque",
	} {
		if got, err := ParseURL(raw); err == nil {
			t.Errorf("%s taken as %+v", raw, got)
		}
	}
	if _, err := ParseURL("https://127.0.0.1:15000"); !errors.Is(err, ErrHTTPS) {
		t.Errorf("https: %v, want ErrHTTPS", err)
	}
}
