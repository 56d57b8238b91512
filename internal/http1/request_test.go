package http1

import "testing"

// A header name that is not a token must not hide a body: `Content-Length
// : 5` read as another header would leave the body to be served as the
// next request.
func TestParseRequestRefusesHiddenBodies(t *testing.T) {
	for _, head := range []string{
		"POST /v1/complete HTTP/1.1\r\nContent-Length : 5\r\n\r\n",
		"POST /v1/complete HTTP/1.1\r\nTransfer-Encoding\t: chunked\r\n\r\n",
		"POST /v1/complete HTTP/1.1\r\nContent-Length: 0\r\nContent-Length : 40\r\n\r\n",
		"GET / HTTP/1.1\r\n folded: x\r\n\r\n",
		"GET / HTTP/1.1\r\nX(y): 1\r\n\r\n",
	} {
		if r, ok := ParseRequest([]byte(head)); ok && !r.Body {
			t.Errorf("%q taken as a request without a body", head)
		}
	}
	for head, body := range map[string]bool{
		"GET /healthz/ready HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 10.0.0.1\r\n\r\n": false,
		"POST /v1/drain HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n":             false,
		"POST /v1/drain HTTP/1.1\r\nHost: x\r\ncontent-length: 2\r\n\r\n":             true,
		"POST /v1/drain HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n":    true,
	} {
		r, ok := ParseRequest([]byte(head))
		if !ok || r.Body != body {
			t.Errorf("%q: ok %v, body %v; want ok and body %v", head, ok, r.Body, body)
		}
	}
}

// What net/http's server refuses, ParseRequest refuses: each of these was
// taken once.
func TestParseRequestRefusesWhatNetHTTPRefuses(t *testing.T) {
	for _, head := range []string{
		"G(T / HTTP/1.1\r\nHost: x\r\n\r\n",                             // a method that is not a token
		"GET / HTTP/1.1\r\n\r\n",                                        // HTTP/1.1 without Host
		"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",                  // two Hosts
		"GET / HTTP/1.1\r\nHost: x\r\nX: a\x01b\r\n\r\n",                // a control character in a value
		"GET /%zz HTTP/1.1\r\nHost: x\r\n\r\n",                          // a bad escape in the path
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\n",      // a signed length
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", // no coding but chunked
	} {
		if _, ok := ParseRequest([]byte(head)); ok {
			t.Errorf("%q taken", head)
		}
	}
}

// The class table is what its definitions make it: each class's bytes,
// from the RFCs' and net/http's sets.
func TestClassTable(t *testing.T) {
	want := classes()
	for c := range 256 {
		if class[c] != want[c] {
			t.Errorf("class of %#02x is %#02x, want %#02x", c, class[c], want[c])
		}
	}
}

func classes() (t [256]uint8) {
	set := func(bits uint8, chars string) {
		for i := range len(chars) {
			t[chars[i]] |= bits
		}
	}
	for c := range 256 {
		if c >= ' ' && c != 0x7f || c == '\t' {
			t[c] |= cValue
		}
		if c > ' ' && c != 0x7f && c != '#' {
			t[c] |= cTarget
		}
	}
	for c := byte('!'); c < 0x7f; c++ {
		t[c] |= cToken
	}
	for _, c := range []byte(`"(),/:;<=>?@[\]{}`) {
		t[c] &^= cToken
	}
	const digits, letters = "0123456789", "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	set(cDigit|cHex|cIPv6, digits)
	set(cHex|cIPv6, "abcdefABCDEF")
	set(cHost|cName, digits+letters)
	set(cHost, "!$%&'()*+,-.:;=[]_~")
	set(cName, "-._")
	set(cIPv6, ":.")
	return t
}
