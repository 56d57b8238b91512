package health

import (
	"bytes"
	"testing"
)

// Whatever reaches the port, the head's end is found inside what was read
// and the parser never panics; a request it takes has a method and a path
// that the router can match, without its query.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"GET /healthz/ready HTTP/1.1\r\nHost: x\r\n\r\n",
		"HEAD /healthz/live HTTP/1.0\n\n",
		"GET http://10.0.0.1:15022/metrics?x=1 HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n",
		"POST /healthz/ready HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
		"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET / HTTP/1.1\r\n folded: x\r\n\r\n",
		"GET  / HTTP/1.1\r\n\r\n",
		"\r\n\r\n",
		"GET /healthz/ready HTTP/1.1\r\n\r\nGET /healthz/live HTTP/1.1\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		end := headerEnd(in)
		if end < 0 {
			return
		}
		if end > len(in) || in[end-1] != '\n' || headerEnd(in[:end]) != end {
			t.Fatalf("headerEnd %d of %q", end, in)
		}
		r, ok := parse(in[:end])
		if !ok {
			return
		}
		if len(r.method) == 0 || bytes.IndexByte(r.method, ' ') >= 0 {
			t.Fatalf("method %q from %q", r.method, in)
		}
		if len(r.path) == 0 || r.path[0] != '/' || bytes.IndexByte(r.path, '?') >= 0 {
			t.Fatalf("path %q from %q", r.path, in)
		}
	})
}
