package health

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// dial connects to addr until the test ends.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// exchange sends raw to a ready server and returns all it answers until
// it closes the connection or has been quiet for a while.
func exchange(t *testing.T, addr, raw string) string {
	t.Helper()
	c := dial(t, addr)
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(idleTimeout + 2*time.Second))
	b, _ := io.ReadAll(c)
	return string(b)
}

// What a probe, a scrape or a stray client sends, and what it gets: the
// status line of each response, in order, and whether the server then
// closed the connection before its idle timeout.
func TestProtocol(t *testing.T) {
	addr := serveReady(t)
	for _, tc := range []struct {
		name, raw string
		want      []string // status lines
		closes    bool     // with Connection: close, at once
		has       string   // in the whole answer
	}{
		{"kubelet probe", "GET /healthz/ready HTTP/1.1\r\nHost: x\r\nUser-Agent: kube-probe/1.37\r\nAccept: */*\r\nConnection: close\r\n\r\n", []string{"HTTP/1.1 200 OK"}, true, "\r\n\r\nready\n"},
		{"HTTP/1.0", "GET /healthz/live HTTP/1.0\r\n\r\n", []string{"HTTP/1.1 200 OK"}, true, "live\n"},
		{"query and bare LF", "GET /healthz/ready?x=1 HTTP/1.1\nHost: x\n\n", []string{"HTTP/1.1 200 OK"}, false, "ready\n"},
		{"absolute form", "GET http://10.0.0.1:15022/healthz/ready HTTP/1.1\r\nHost: x\r\n\r\n", []string{"HTTP/1.1 200 OK"}, false, ""},
		{"pipelined", "GET /healthz/ready HTTP/1.1\r\nHost: x\r\n\r\nHEAD /healthz/live HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Close\r\n\r\n",
			[]string{"HTTP/1.1 200 OK", "HTTP/1.1 200 OK", "HTTP/1.1 404 Not Found"}, true, ""},
		{"HEAD has no body", "HEAD /healthz/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", []string{"HTTP/1.1 200 OK"}, true, "Content-Length: 6\r\nConnection: close\r\n\r\n"},
		{"POST", "POST /healthz/ready HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", []string{"HTTP/1.1 405 Method Not Allowed"}, false, "Allow: GET, HEAD"},
		{"a body", "GET /healthz/ready HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", []string{"HTTP/1.1 400 Bad Request"}, true, ""},
		{"chunked", "GET /healthz/ready HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", []string{"HTTP/1.1 400 Bad Request"}, true, ""},
		{"HTTP/1.1 without Host", "GET /healthz/ready HTTP/1.1\r\n\r\n", []string{"HTTP/1.1 400 Bad Request"}, true, ""},
		{"method not a token", "GE(T /healthz/ready HTTP/1.1\r\nHost: x\r\n\r\n", []string{"HTTP/1.1 400 Bad Request"}, true, ""},
		{"folded header", "GET /healthz/ready HTTP/1.1\r\nX: a\r\n b\r\n\r\n", []string{"HTTP/1.1 400 Bad Request"}, true, ""},
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", []string{"HTTP/1.1 400 Bad Request"}, true, ""},
		{"garbage", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", []string{"HTTP/1.1 400 Bad Request"}, true, ""},
		{"dot segments", "GET /healthz/ready/../../quitquitquit HTTP/1.1\r\nHost: x\r\n\r\n", []string{"HTTP/1.1 404 Not Found"}, false, ""},
		{"headers too large", "GET /healthz/ready HTTP/1.1\r\nX: " + strings.Repeat("a", maxHeader) + "\r\n\r\n", []string{"HTTP/1.1 431 Request Header Fields Too Large"}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			got := exchange(t, addr, tc.raw)
			var status []string
			for _, line := range strings.Split(strings.ReplaceAll(got, "\r\n", "\n"), "\n") {
				if strings.HasPrefix(line, "HTTP/") {
					status = append(status, line)
				}
			}
			if strings.Join(status, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("status lines %q, want %q; answer:\n%s", status, tc.want, got)
			}
			if tc.has != "" && !strings.Contains(got, tc.has) {
				t.Errorf("answer lacks %q:\n%s", tc.has, got)
			}
			if closedAtOnce := time.Since(start) < idleTimeout/2; closedAtOnce != tc.closes {
				t.Errorf("closed at once: %v, want %v", closedAtOnce, tc.closes)
			}
		})
	}
}

// A request that trickles in is cut off headerTimeout after its first
// byte, even when it keeps sending.
func TestTrickledHeadersCutOff(t *testing.T) {
	addr := serveReady(t)
	c := dial(t, addr)
	start := time.Now()
	for time.Since(start) < headerTimeout+3*time.Second {
		if _, err := io.WriteString(c, "X"); err != nil {
			return // cut off
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("still open after %v of trickled headers", time.Since(start))
}
