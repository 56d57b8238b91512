package envoy

// The tracker polls a starting proxy a hundred times a second; what each
// poll leaves for the collector is most of the supervisor's idle memory.
// go test -run '^$' -bench Refused -benchmem ./internal/envoy/

import (
	"context"
	"net"
	"testing"
)

func BenchmarkRefusedPoll(b *testing.B) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	a, _ := NewAdmin("http://" + addr)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		a.ServerState(context.Background())
	}
}

func BenchmarkBoundRefused(b *testing.B) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	a, _ := NewAdmin("http://" + addr)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		a.Bound(context.Background())
	}
}
