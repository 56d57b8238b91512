package portwatch

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The sockets in the captured fixtures (see testdata/README).
var (
	capturedInet = []Socket{
		{Addr: netip.MustParseAddrPort("0.0.0.0:47002"), UID: 1337, Inode: 16885},
		{Addr: netip.MustParseAddrPort("127.0.0.1:47001"), UID: 1337, Inode: 16881},
	}
	capturedInet6 = []Socket{
		{Addr: netip.MustParseAddrPort("[::]:47004"), UID: 1337, Inode: 16889},
		{Addr: netip.MustParseAddrPort("[::1]:47003"), UID: 1337, Inode: 16887},
		{Addr: netip.MustParseAddrPort("[::ffff:127.0.0.1]:47005"), UID: 1337, Inode: 16891},
	}
)

// readHex returns the datagrams of a .hex fixture: one per line, spaces ignored,
// lines starting with # skipped.
func readHex(tb testing.TB, name string) [][]byte {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	var grams [][]byte
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		b, err := hex.DecodeString(strings.Join(strings.Fields(line), ""))
		if err != nil {
			tb.Fatalf("%s: %v", name, err)
		}
		grams = append(grams, b)
	}
	return grams
}

func TestParseDiagFixtures(t *testing.T) {
	tests := []struct {
		file            string
		want            []Socket
		wantInterrupted bool
		wantErr         error
	}{
		{file: "diag_inet.hex", want: capturedInet},
		{file: "diag_inet6.hex", want: capturedInet6},
		{file: "diag_intr.hex", want: capturedInet, wantInterrupted: true},
		{file: "diag_error.hex", wantErr: unix.EPERM},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			var (
				got         []Socket
				st          diagStatus
				err         error
				interrupted bool
			)
			grams := readHex(t, tt.file)
			for i, g := range grams {
				if st.done {
					t.Fatalf("datagram %d follows the end of the dump", i)
				}
				got, st, err = parseDiag(g, got)
				interrupted = interrupted || st.interrupted
				if err != nil {
					break
				}
			}
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if !st.done {
				t.Error("the dump never ended")
			}
			if interrupted != tt.wantInterrupted {
				t.Errorf("interrupted = %v, want %v", interrupted, tt.wantInterrupted)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("sockets:\n got %v\nwant %v", got, tt.want)
			}
		})
	}
}

// nlmsg builds one netlink message; the length is computed unless size is non-zero.
func nlmsg(typ, flags uint16, size uint32, payload ...[]byte) []byte {
	body := slices.Concat(payload...)
	if size == 0 {
		size = uint32(unix.NLMSG_HDRLEN + len(body))
	}
	b := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(body)+3)
	binary.NativeEndian.PutUint32(b[0:], size)
	binary.NativeEndian.PutUint16(b[4:], typ)
	binary.NativeEndian.PutUint16(b[6:], flags)
	binary.NativeEndian.PutUint32(b[8:], 1)
	b = append(b, body...)
	for len(b)%unix.NLMSG_ALIGNTO != 0 {
		b = append(b, 0)
	}
	return b
}

func i32(v int32) []byte { return binary.NativeEndian.AppendUint32(nil, uint32(v)) }

// diagMsg builds an inet_diag_msg for a socket.
func diagMsg(state uint8, s Socket) []byte {
	p := make([]byte, sizeofInetDiagMsg)
	p[diagState] = state
	a := s.Addr.Addr()
	if a.Is4() {
		p[diagFamily] = unix.AF_INET
		copy(p[diagSrc:], a.AsSlice())
	} else {
		p[diagFamily] = unix.AF_INET6
		copy(p[diagSrc:], a.AsSlice())
	}
	binary.BigEndian.PutUint16(p[diagSport:], s.Addr.Port())
	binary.NativeEndian.PutUint32(p[diagUID:], s.UID)
	binary.NativeEndian.PutUint32(p[diagInode:], uint32(s.Inode))
	return p
}

func TestParseDiag(t *testing.T) {
	v4 := Socket{Addr: netip.MustParseAddrPort("10.0.0.1:8080"), UID: 1000, Inode: 42}
	v6 := Socket{Addr: netip.MustParseAddrPort("[fd00::1]:9090"), UID: 0, Inode: 1<<32 - 1}
	done := nlmsg(unix.NLMSG_DONE, unix.NLM_F_MULTI, 0, i32(0))
	odd := diagMsg(tcpListen, v4)
	odd = append(odd, 1) // an attribute's worth of unaligned tail

	tests := []struct {
		name     string
		in       []byte
		want     []Socket
		wantDone bool
		wantErr  string
		wantErrn unix.Errno
	}{
		{name: "empty", in: nil},
		{name: "v4 and v6 then done", in: slices.Concat(
			nlmsg(unix.SOCK_DIAG_BY_FAMILY, unix.NLM_F_MULTI, 0, diagMsg(tcpListen, v4)),
			nlmsg(unix.SOCK_DIAG_BY_FAMILY, unix.NLM_F_MULTI, 0, diagMsg(tcpListen, v6)),
			done), want: []Socket{v4, v6}, wantDone: true},
		{name: "unpadded last message", in: nlmsg(unix.SOCK_DIAG_BY_FAMILY, 0, uint32(unix.NLMSG_HDRLEN+len(odd)), odd)[:unix.NLMSG_HDRLEN+len(odd)],
			want: []Socket{v4}},
		{name: "non-listening socket skipped", in: nlmsg(unix.SOCK_DIAG_BY_FAMILY, 0, 0, diagMsg(1, v4))},
		{name: "noop skipped", in: slices.Concat(nlmsg(unix.NLMSG_NOOP, 0, 0), done), wantDone: true},
		{name: "done ends the datagram", in: slices.Concat(done,
			nlmsg(unix.SOCK_DIAG_BY_FAMILY, 0, 0, diagMsg(tcpListen, v4))), wantDone: true},
		{name: "done without payload", in: nlmsg(unix.NLMSG_DONE, 0, 0), wantDone: true},
		{name: "done carrying an error", in: nlmsg(unix.NLMSG_DONE, 0, 0, i32(-int32(unix.ENOBUFS))),
			wantDone: true, wantErrn: unix.ENOBUFS},
		{name: "ack", in: nlmsg(unix.NLMSG_ERROR, 0, 0, i32(0)), wantDone: true},
		{name: "error EACCES", in: nlmsg(unix.NLMSG_ERROR, 0, 0, i32(-int32(unix.EACCES))),
			wantDone: true, wantErrn: unix.EACCES},
		{name: "error without code", in: nlmsg(unix.NLMSG_ERROR, 0, 0), wantDone: true, wantErr: "payload"},
		{name: "short header", in: []byte{1, 2, 3}, wantErr: "short of a header"},
		{name: "length below header", in: nlmsg(unix.NLMSG_DONE, 0, 8), wantErr: "message length"},
		{name: "length past datagram", in: nlmsg(unix.NLMSG_DONE, 0, 200), wantErr: "message length"},
		{name: "short inet_diag_msg", in: nlmsg(unix.SOCK_DIAG_BY_FAMILY, 0, 0, make([]byte, 40)), wantErr: "inet_diag_msg of 40 bytes"},
		{name: "unknown family", in: nlmsg(unix.SOCK_DIAG_BY_FAMILY, 0, 0,
			func() []byte { p := diagMsg(tcpListen, v4); p[diagFamily] = 99; return p }()), wantErr: "family 99"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, st, err := parseDiag(tt.in, nil)
			switch {
			case tt.wantErrn != 0:
				if !errors.Is(err, tt.wantErrn) {
					t.Fatalf("err = %v, want %v", err, tt.wantErrn)
				}
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, tt.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			}
			if st.done != tt.wantDone {
				t.Errorf("done = %v, want %v", st.done, tt.wantDone)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("sockets:\n got %v\nwant %v", got, tt.want)
			}
		})
	}
}

func TestDiagRequest(t *testing.T) {
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		b := diagRequest(family, 7)
		ne := binary.NativeEndian
		hdr := unix.NlMsghdr{Len: ne.Uint32(b[0:]), Type: ne.Uint16(b[4:]), Flags: ne.Uint16(b[6:]), Seq: ne.Uint32(b[8:]), Pid: ne.Uint32(b[12:])}
		want := unix.NlMsghdr{Len: 72, Type: unix.SOCK_DIAG_BY_FAMILY, Flags: unix.NLM_F_REQUEST | unix.NLM_F_DUMP, Seq: 7}
		if hdr != want {
			t.Errorf("header = %+v, want %+v", hdr, want)
		}
		req := b[unix.NLMSG_HDRLEN:]
		if req[0] != family || req[1] != unix.IPPROTO_TCP || req[2] != 0 {
			t.Errorf("family, protocol, ext = %d, %d, %d", req[0], req[1], req[2])
		}
		if states := ne.Uint32(req[4:]); states != 1<<10 {
			t.Errorf("states = %#x, want LISTEN only (%#x)", states, 1<<10)
		}
		if !bytes.Equal(req[8:], make([]byte, 48)) {
			t.Errorf("socket id = %x, want zeros for a dump", req[8:])
		}
	}
}

// fakeConn answers each request with the next canned list of datagrams.
type fakeConn struct {
	answers [][][]byte
	sent    []uint8 // families asked for
	pending [][]byte
	closed  bool
}

func (f *fakeConn) send(req []byte) error {
	if len(f.sent) >= len(f.answers) {
		return fmt.Errorf("unexpected request %d", len(f.sent)+1)
	}
	f.pending = f.answers[len(f.sent)]
	f.sent = append(f.sent, req[unix.NLMSG_HDRLEN])
	return nil
}

func (f *fakeConn) recv(buf []byte) (int, error) {
	if len(f.pending) == 0 {
		return 0, unix.EAGAIN
	}
	n := copy(buf, f.pending[0])
	f.pending = f.pending[1:]
	return n, nil
}

func (f *fakeConn) close() error { f.closed = true; return nil }

func TestDumpFamily(t *testing.T) {
	inet := readHex(t, "diag_inet.hex")
	intr := readHex(t, "diag_intr.hex")
	perm := readHex(t, "diag_error.hex")
	prior := Socket{Addr: netip.MustParseAddrPort("[::1]:1")}

	tests := []struct {
		name      string
		answers   [][][]byte
		bufSize   int
		want      []Socket
		wantSends int
		wantErr   string
		wantErrn  unix.Errno
	}{
		{name: "clean", answers: [][][]byte{inet}, want: capturedInet, wantSends: 1},
		{name: "interrupted once", answers: [][][]byte{intr, inet}, want: capturedInet, wantSends: 2},
		{name: "interrupted four times", answers: [][][]byte{intr, intr, intr, intr, inet}, want: capturedInet, wantSends: 5},
		{name: "interrupted every time", answers: [][][]byte{intr, intr, intr, intr, intr, inet},
			wantSends: dumpTries, wantErr: "interrupted 5 times"},
		{name: "refused", answers: [][][]byte{perm}, wantSends: 1, wantErrn: unix.EPERM},
		{name: "no answer", answers: [][][]byte{nil}, wantSends: 1, wantErrn: unix.EAGAIN},
		{name: "dump cut short", answers: [][][]byte{inet[:1]}, wantSends: 1, wantErrn: unix.EAGAIN},
		{name: "truncated datagram", answers: [][][]byte{inet}, bufSize: len(inet[0]), wantSends: 1, wantErr: "truncated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &fakeConn{answers: tt.answers}
			buf := make([]byte, cmp.Or(tt.bufSize, recvBufSize))
			got, err := dumpFamily(c, buf, unix.AF_INET, []Socket{prior})
			switch {
			case tt.wantErrn != 0:
				if !errors.Is(err, tt.wantErrn) {
					t.Fatalf("err = %v, want %v", err, tt.wantErrn)
				}
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, tt.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			}
			if want := append([]Socket{prior}, tt.want...); !slices.Equal(got, want) {
				t.Errorf("sockets:\n got %v\nwant %v", got, want)
			}
			if len(c.sent) != tt.wantSends {
				t.Errorf("sent %d requests, want %d", len(c.sent), tt.wantSends)
			}
		})
	}
}

func TestRefused(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("open: %w", unix.EPERM), true},
		{fmt.Errorf("open: %w", unix.EACCES), true},
		{fmt.Errorf("open: %w", unix.EPROTONOSUPPORT), true},
		{fmt.Errorf("open: %w", unix.EAFNOSUPPORT), true},
		{fmt.Errorf("dump: %w", unix.ENOENT), true},
		{fmt.Errorf("read: %w", unix.EAGAIN), false},
		{fmt.Errorf("dump: %w", unix.ENOBUFS), false},
		{errors.New("sock_diag dump interrupted 5 times in a row"), false},
	}
	for _, tt := range tests {
		if got := refused(tt.err); got != tt.want {
			t.Errorf("refused(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func FuzzParseDiag(f *testing.F) {
	for _, name := range []string{"diag_inet.hex", "diag_inet6.hex", "diag_intr.hex", "diag_error.hex"} {
		for _, g := range readHex(f, name) {
			f.Add(g)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		socks, _, _ := parseDiag(b, nil)
		if max := len(b) / (unix.NLMSG_HDRLEN + sizeofInetDiagMsg); len(socks) > max {
			t.Fatalf("%d sockets from %d bytes", len(socks), len(b))
		}
		for _, s := range socks {
			if !s.Addr.IsValid() {
				t.Fatalf("invalid address in %+v", s)
			}
		}
	})
}
