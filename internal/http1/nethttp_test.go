package http1

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The seeds of the differential targets: what the supervisor's clients and
// servers send, and each leniency a differential run found once.
var (
	requestSeeds = []string{
		"GET /healthz/ready HTTP/1.1\r\nHost: 10.0.0.7:15022\r\nUser-Agent: kube-probe/1.37\r\nAccept: */*\r\n\r\n",
		"GET /healthz/live HTTP/1.0\r\n\r\n",
		"GET http://10.0.0.1:15022/metrics?x=1 HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Close\r\n\r\n",
		"POST /v1/complete?exit_code=0&peer=app HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n\r\n",
		"POST /v1/drain HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n",
		"GET /v1/ready?wait=30s HTTP/1.1\r\nHost: %2Frun%2Fcontrol.sock\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
		"G(T / HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nX: a\x01b\r\n\r\n",
		"GET /%zz HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\n",
	}
	responseSeeds = []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nTrailer: t\r\n\r\n",
		"HTTP/1.0 503 Service Unavailable\r\n\r\nnot ready",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nContent (Length): 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX: a\x00b\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nConnection: close\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 101 Switching Protocols\r\n\r\n",
	}
)

// netHTTPServerTakes is whether net/http's own server serves the request
// head, and the request its handler gets. The head goes to a real
// http.Server over a pipe: its handler is called, or it answers an error
// and closes without calling it.
func netHTTPServerTakes(head []byte) (*http.Request, bool) {
	pipeServer.once.Do(func() {
		pipeServer.conns = make(chan net.Conn)
		pipeServer.handled = make(chan *http.Request)
		srv := &http.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				pipeServer.handled <- r
			}),
			ErrorLog: log.New(io.Discard, "", 0),
		}
		go srv.Serve(pipeListener(pipeServer.conns))
	})
	client, server := net.Pipe()
	defer client.Close()
	pipeServer.conns <- server
	go client.Write(head)
	answered := make(chan struct{})
	go func() {
		client.Read(make([]byte, 1))
		close(answered)
	}()
	select {
	case r := <-pipeServer.handled:
		return r, true
	case <-answered:
		return nil, false
	case <-time.After(2 * time.Second):
		// net/http still waits for the rest of a head it takes as
		// incomplete: it has not taken the bytes as a request.
		return nil, false
	}
}

var pipeServer struct {
	once    sync.Once
	conns   chan net.Conn
	handled chan *http.Request
}

// pipeListener hands out the connections sent on it.
type pipeListener chan net.Conn

func (l pipeListener) Accept() (net.Conn, error) { return <-l, nil }
func (l pipeListener) Close() error              { return nil }
func (l pipeListener) Addr() net.Addr            { return &net.UnixAddr{Name: "pipe", Net: "unix"} }

// What ParseRequest takes, net/http's server takes too, and reads alike:
// the same method, path and query, no body where it sees none, and a
// connection kept only where net/http keeps it. http1 may refuse more
// (it takes a subset of HTTP/1.1), never less.
func FuzzParseRequestAsNetHTTP(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		end := HeadEnd(in)
		if end < 0 {
			return
		}
		r, ok := ParseRequest(in[:end])
		if !ok {
			return
		}
		req, ok := netHTTPServerTakes(in[:end])
		if !ok {
			t.Fatalf("http1 takes what net/http refuses: %q", in[:end])
		}
		path, err := url.PathUnescape(string(r.Path))
		if string(r.Method) != req.Method || err != nil || path != req.URL.Path || string(r.Query) != req.URL.RawQuery {
			t.Fatalf("%q: http1 reads %s %q ? %q, net/http %s %q ? %q", in[:end], r.Method, r.Path, r.Query, req.Method, req.URL.Path, req.URL.RawQuery)
		}
		if !r.Close && req.Close || req.ProtoMinor == 1 && r.Close != req.Close {
			t.Fatalf("%q: http1 closes %v, net/http %v", in[:end], r.Close, req.Close)
		}
		if !r.Body && (req.ContentLength != 0 || len(req.TransferEncoding) > 0) {
			t.Fatalf("%q: a body net/http reads (length %d, %q) taken as none", in[:end], req.ContentLength, req.TransferEncoding)
		}
	})
}

// netHTTPClientReads is the answer net/http's client would read from in:
// interim answers skipped as its Transport skips them, the body read whole.
func netHTTPClientReads(in []byte) (*http.Response, []byte, bool) {
	br := bufio.NewReader(bytes.NewReader(in))
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return nil, nil, false
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != 101 {
			continue
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, nil, false
		}
		return resp, body, true
	}
}

// What ReadResponse takes, net/http's client takes too, and reads alike:
// the same code, reason and body, and a connection kept only where
// net/http would keep it.
func FuzzReadResponseAsNetHTTP(f *testing.F) {
	for _, s := range responseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		resp, keep, err := ReadResponse(bufio.NewReader(bytes.NewReader(in)), 1<<20)
		if err != nil {
			return
		}
		want, body, ok := netHTTPClientReads(in)
		if !ok {
			t.Fatalf("http1 reads what net/http refuses: %q", in)
		}
		if resp.Code != want.StatusCode || strconv.Itoa(resp.Code)+" "+resp.Status != want.Status && resp.Status != "" {
			t.Fatalf("%q: http1 reads %d %q, net/http %q", in, resp.Code, resp.Status, want.Status)
		}
		if !bytes.Equal(resp.Body, body) {
			t.Fatalf("%q: http1 reads the body %q, net/http %q", in, resp.Body, body)
		}
		if keep && want.Close {
			t.Fatalf("%q: http1 keeps a connection net/http closes", in)
		}
	})
}

// What ParseURL takes, net/url takes as an http URL of the same host, path
// and query: ParseURL is written out to keep net/url's parser out of the
// binary, not to read URLs otherwise.
func FuzzParseURLAsNetURL(f *testing.F) {
	for _, s := range []string{
		"http://127.0.0.1:15000", "http://[::1]:15020/healthz/ready?x=1", "HTTP://envoy/stats?filter=a%20b",
		"http://u@h/", "http://h:0", "unix:///run/admin.sock", "unix://h/x", "unix:///a%20b", "http://h/%zz", "http://[::1", "http://::1/", "http://h?q", "http://h/a b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got, err := ParseURL(raw)
		if err != nil {
			return
		}
		u, err := url.Parse(raw)
		if got.Network == "unix" {
			if err != nil || !strings.EqualFold(u.Scheme, "unix") || u.Host != "" || u.Path != got.Addr || u.RawQuery != "" {
				t.Fatalf("%q: ParseURL %+v, net/url %+v (%v)", raw, got, u, err)
			}
			return
		}
		if err != nil || !strings.EqualFold(u.Scheme, "http") || u.User != nil || u.Host != got.Host {
			t.Fatalf("%q: ParseURL %+v, net/url %+v (%v)", raw, got, u, err)
		}
		path, query, _ := strings.Cut(got.Target, "?")
		if p, err := url.PathUnescape(path); err != nil || p != u.Path && !(p == "/" && u.Path == "") || query != u.RawQuery {
			t.Fatalf("%q: ParseURL target %q, net/url path %q query %q", raw, got.Target, u.Path, u.RawQuery)
		}
	})
}

// ParseQuery and PathUnescape read what net/url's namesakes read, with the
// same results and the same errors (the control socket answers them), and
// what Encode writes is escaped as net/url's QueryEscape escapes it and
// read back by net/url as the same parameters: the codec is written out to
// keep net/url out of the binary, not to read queries otherwise.
func FuzzQueryAsNetURL(f *testing.F) {
	for _, s := range []string{
		"wait=30s", "exit_code=0&peer=app&reason=signal%3A+killed", "usedonly&filter=%5Ecluster%5C.", "format=json",
		"a;b=c", "x=1&a;b&%zz", "%zz=1&a;b", "a=%z", "x=1&%", "a=b&&c", "=x", "k=v=w", "a+b%20c=%2B", "%e2%82%ac=%FF", "signal: killed, 100%~_.-",
		"/v1/ready", "/v1/%72eady", "/a%2fb+c", "%", "%1", strings.Repeat("&", maxParams), strings.Repeat("&", maxParams-1),
	} {
		f.Add(s, "peer", s)
	}
	f.Fuzz(func(t *testing.T, s, key, value string) {
		q, err := ParseQuery(s)
		want, werr := url.ParseQuery(s)
		got := url.Values{}
		for _, p := range q {
			got.Add(p.Key, p.Value)
		}
		if fmt.Sprint(err) != fmt.Sprint(werr) || !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: ParseQuery %v (%v), net/url %v (%v)", s, got, err, want, werr)
		}
		p, err := PathUnescape(s)
		wp, werr := url.PathUnescape(s)
		if p != wp || fmt.Sprint(err) != fmt.Sprint(werr) {
			t.Fatalf("%q: PathUnescape %q (%v), net/url %q (%v)", s, p, err, wp, werr)
		}
		q = Query{{key, value}, {value, key}, {"wait", value}}
		var parts []string
		want = url.Values{}
		for _, p := range q {
			if p.Value == "" {
				parts = append(parts, url.QueryEscape(p.Key))
			} else {
				parts = append(parts, url.QueryEscape(p.Key)+"="+url.QueryEscape(p.Value))
			}
			if p != (Param{}) {
				want.Add(p.Key, p.Value)
			}
		}
		enc := q.Encode()
		if enc != strings.Join(parts, "&") {
			t.Fatalf("%q: Encode %q, net/url's escapes %q", q, enc, strings.Join(parts, "&"))
		}
		if back, err := url.ParseQuery(enc); err != nil || !reflect.DeepEqual(back, want) {
			t.Fatalf("%q: Encode %q, which net/url reads as %v (%v)", q, enc, back, err)
		}
	})
}
