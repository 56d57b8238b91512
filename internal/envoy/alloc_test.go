package envoy

// The tracker polls a starting proxy a hundred times a second; what each
// poll leaves for the collector is most of the supervisor's idle memory.
// go test -run '^$' -bench Poll -benchmem ./internal/envoy/

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// refusedAdmin is an admin client of a port that nothing listens on.
func refusedAdmin(b *testing.B) *Admin {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	a, err := adminFor("http://" + addr)
	if err != nil {
		b.Fatal(err)
	}
	return a
}

func BenchmarkRefusedPoll(b *testing.B) {
	a := refusedAdmin(b)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		a.ServerState(context.Background())
	}
}

func BenchmarkBoundRefused(b *testing.B) {
	a := refusedAdmin(b)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		a.Listening(context.Background())
	}
}

// A poll of a ready proxy, over the kept connection.
func BenchmarkLivePoll(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("LIVE\n")) }))
	defer srv.Close()
	a, err := adminFor(srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, ready, err := a.ServerState(context.Background()); !ready || err != nil {
			b.Fatal(ready, err)
		}
	}
}

// A tracker's poll of a proxy that is bound but not yet LIVE, which it
// makes every 10 ms while Envoy starts.
func BenchmarkTrackerPollStarting(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("PRE_INITIALIZING\n"))
	}))
	defer srv.Close()
	a, err := adminFor(srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	t := NewTracker(a, TrackerConfig{})
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if st := t.poll(context.Background()); st.Ready || st.Reason != "PRE_INITIALIZING" {
			b.Fatalf("poll = %+v", st)
		}
	}
}
