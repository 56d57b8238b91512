package kubelettest

import (
	"bytes"
	"context"
	"errors"
	"net"
	"slices"
	"testing"
	"time"
)

// serveNXDOMAIN answers every DNS query on conn with NXDOMAIN (RFC 1035
// 4.1.1: the query's ID and question, QR set, RCODE 3), until conn is
// closed.
func serveNXDOMAIN(conn net.PacketConn) {
	buf := make([]byte, 512)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			return
		}
		q := buf[:n]
		if len(q) < 12 || q[2]&0x80 != 0 {
			continue // not a query
		}
		// The header and the first question: its name's labels, then type
		// and class.
		end := 12
		for end < len(q) && q[end] != 0 {
			end += 1 + int(q[end])
		}
		end += 5
		if end > len(q) {
			continue
		}
		resp := make([]byte, end)
		copy(resp, q[:end])
		resp[2] = 0x80 | q[2]&0x79 // QR, opcode, RD
		resp[3] = 0x80 | 3         // RA, NXDOMAIN
		resp[4], resp[5] = 0, 1    // one question
		clear(resp[6:12])          // no answer, authority or additional record
		conn.WriteTo(resp, from)   //nolint:errcheck // the client retries
	}
}

// The cluster DNS responder answers a lookup with NXDOMAIN, which a
// resolver takes as "no such host" at once, without a retry or a timeout.
func TestClusterDNSAnswersNXDOMAIN(t *testing.T) {
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	go serveNXDOMAIN(conn)
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", conn.LocalAddr().String())
	}}
	// The answer itself: the query's ID and question, QR, RD and RA set,
	// RCODE 3, no record.
	query := []byte{0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 1, 'a', 7, 'e', 'x', 'a', 'm', 'p', 'l', 'e', 0, 0, 1, 0, 1}
	c, err := net.Dial("udp", conn.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck
	if _, err := c.Write(query); err != nil {
		t.Fatal(err)
	}
	resp := make([]byte, 512)
	n, err := c.Read(resp)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(query)
	want[2], want[3] = 0x81, 0x83
	if !bytes.Equal(resp[:n], want) {
		t.Fatalf("answer % x, want % x", resp[:n], want)
	}
	// And a resolver takes it as no such host at once.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err = r.LookupHost(ctx, "kubernetes.default.svc.cluster.local")
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Fatalf("lookup: %v, want no such host", err)
	}
	// Under the resolver's 5 s timeout of a try: the answer came at
	// once, not after a silent server's timeout (a busy node's pace
	// aside).
	if took := time.Since(start); took > 4*time.Second {
		t.Fatalf("the answer took %s", took)
	}
}
