package fakeenvoy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func twoListeners() Options {
	return Options{Listeners: []Listener{
		{Name: "virtualOutbound", Addr: "127.0.0.1:0"},
		{Name: "virtualInbound", Addr: "127.0.0.1:0", Inbound: true},
	}}
}

func TestListenersJSONIsEnvoysShape(t *testing.T) {
	t.Parallel()
	e := start(t, twoListeners())
	// Listed from the start, like Envoy's static listeners, before any is listening.
	eventually(t, "admin", func() bool { return !refused(e.AdminAddr()) })
	out, in := e.ListenerAddrs()[0], e.ListenerAddrs()[1]
	want := fmt.Sprintf(`{
 "listener_statuses": [
  {
   "name": "virtualOutbound",
   "local_address": {
    "socket_address": {
     "address": "127.0.0.1",
     "port_value": %d
    }
   }
  },
  {
   "name": "virtualInbound",
   "local_address": {
    "socket_address": {
     "address": "127.0.0.1",
     "port_value": %d
    }
   }
  }
 ]
}`, out.Port(), in.Port())
	eventually(t, "answering", func() bool {
		a, err := tryCall(e, "GET", "/listeners?format=json", time.Second)
		return err == nil && a.code == 200
	})
	if a := call(t, e, "GET", "/listeners?format=json"); a.body != want {
		t.Errorf("got\n%s\nwant\n%s", a.body, want)
	}
	text := fmt.Sprintf("virtualOutbound::127.0.0.1:%d\nvirtualInbound::127.0.0.1:%d\n", out.Port(), in.Port())
	for _, q := range []string{"", "?format=text", "?format="} {
		if a := call(t, e, "GET", "/listeners"+q); a.body != text {
			t.Errorf("/listeners%s: %q, want %q", q, a.body, text)
		}
	}
}

func TestListenersJSONWithoutListeners(t *testing.T) {
	t.Parallel()
	e := startLive(t, Options{})
	if a := call(t, e, "GET", "/listeners?format=json"); a.body != "{}" {
		t.Errorf("got %q; proto JSON omits an empty repeated field", a.body)
	}
}

func TestHTTPListenerAnswersEveryRequest(t *testing.T) {
	t.Parallel()
	e := startLive(t, twoListeners())
	for _, target := range []string{"/", "/anything?x=1"} {
		for _, method := range []string{"GET", "POST", "HEAD"} {
			req, _ := http.NewRequest(method, "http://"+e.ListenerAddrs()[0].String()+target, strings.NewReader("payload"))
			resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			want := "fake-envoy listener virtualOutbound\n"
			if method == "HEAD" {
				want = ""
			}
			if resp.StatusCode != 200 || string(body) != want || resp.Header.Get("Server") != "envoy" || resp.Close {
				t.Errorf("%s %s: %d %q %v close=%v", method, target, resp.StatusCode, body, resp.Header, resp.Close)
			}
		}
	}
	if got := stats(t, e, "?filter=^http.virtualOutbound.downstream_rq_total$")["http.virtualOutbound.downstream_rq_total"]; got != 6 {
		t.Errorf("downstream_rq_total %d, want 6", got)
	}
}

func TestTCPListenerEchoes(t *testing.T) {
	t.Parallel()
	e := startLive(t, Options{Listeners: []Listener{{Name: "tcp", Addr: "127.0.0.1:0", TCP: true}}})
	c := dialHTTP(t, e.ListenerAddrs()[0].String())
	c.nc.SetDeadline(time.Now().Add(2 * time.Second))
	io.WriteString(c.nc, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c.nc, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo: %q %v", buf, err)
	}
}
