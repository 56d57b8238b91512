package http1

import (
	"bufio"
	"bytes"
	"testing"
)

// Whatever reaches a server, the head's end is found inside what was read
// and the parser never panics; a request it takes has a method and a path
// that a router can match, with the query apart.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		"GET /healthz/ready HTTP/1.1\r\nHost: x\r\n\r\n",
		"HEAD /healthz/live HTTP/1.0\n\n",
		"GET http://10.0.0.1:15022/metrics?x=1 HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n",
		"POST /v1/complete?exit_code=0&peer=app HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
		"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET / HTTP/1.1\r\n folded: x\r\n\r\n",
		"GET  / HTTP/1.1\r\n\r\n",
		"\r\n\r\n",
		"GET /healthz/ready HTTP/1.1\r\n\r\nGET /healthz/live HTTP/1.1\r\n\r\n",
		"POST /v1/complete HTTP/1.1\r\nContent-Length: 0\r\nContent-Length : 40\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		end := HeadEnd(in)
		if end < 0 {
			return
		}
		if end > len(in) || in[end-1] != '\n' || HeadEnd(in[:end]) != end {
			t.Fatalf("HeadEnd %d of %q", end, in)
		}
		r, ok := ParseRequest(in[:end])
		if !ok {
			return
		}
		if len(r.Method) == 0 || bytes.IndexByte(r.Method, ' ') >= 0 {
			t.Fatalf("method %q from %q", r.Method, in)
		}
		if len(r.Path) == 0 || r.Path[0] != '/' || bytes.IndexByte(r.Path, '?') >= 0 {
			t.Fatalf("path %q from %q", r.Path, in)
		}
		// No header line that a lenient reader would take for a body's
		// framing hides behind a request taken as bodiless.
		if !r.Body {
			for _, line := range bytes.Split(in[:end], []byte{'\n'})[1:] {
				name, value, _ := bytes.Cut(line, []byte{':'})
				name, value = bytes.TrimSpace(name), bytes.TrimSpace(value)
				if bytes.EqualFold(name, []byte("Transfer-Encoding")) ||
					bytes.EqualFold(name, []byte("Content-Length")) && len(bytes.TrimLeft(value, "0")) > 0 {
					t.Fatalf("a body's framing %q in %q, taken as bodiless", line, in)
				}
			}
		}
	})
}

// Whatever a server answers, ReadResponse never panics, never returns a
// body over its bound, and an answer it takes has a three-digit code.
func FuzzReadResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nTrailer: t\r\n\r\n",
		"HTTP/1.0 503 Service Unavailable\r\n\r\nnot ready",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffff\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
		"HTTP/1.1 2000 OK\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	const bound = 64
	f.Fuzz(func(t *testing.T, in []byte) {
		resp, _, err := ReadResponse(bufio.NewReader(bytes.NewReader(in)), bound)
		if err != nil {
			return
		}
		if resp.Code < 100 || resp.Code > 999 {
			t.Fatalf("code %d from %q", resp.Code, in)
		}
		if len(resp.Body) > bound {
			t.Fatalf("body of %d bytes over the bound %d from %q", len(resp.Body), bound, in)
		}
	})
}
