package portwatch

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestReadProcNetFixtures(t *testing.T) {
	tests := []struct {
		file string
		want []Socket
	}{
		// The fixtures also hold the established connection to 47001, in both
		// directions; only listeners may come out.
		{file: "proc_tcp.txt", want: capturedInet},
		{file: "proc_tcp6.txt", want: capturedInet6},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			got, err := readProcNet(bytes.NewReader(data), nil)
			if err != nil {
				t.Fatal(err)
			}
			// Captured at the same moment as the netlink fixtures, so both paths must
			// describe the same sockets.
			if !slices.Equal(got, tt.want) {
				t.Errorf("sockets:\n got %v\nwant %v", got, tt.want)
			}
		})
	}
}

func TestParseProcLine(t *testing.T) {
	const (
		listen4 = "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 12345 1 0000000000000000 100 0 0 10 0"
		listen6 = "   1: 000080FE00000000FF0200002A0201FE:2382 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4294967296 1 0000000000000000 100 0 0 10 0"
	)
	tests := []struct {
		name    string
		line    string
		want    Socket
		wantOK  bool
		wantErr string
	}{
		{name: "ipv4 listener", line: listen4, wantOK: true,
			want: Socket{Addr: netip.MustParseAddrPort("127.0.0.1:8080"), UID: 1000, Inode: 12345}},
		{name: "ipv6 listener", line: listen6, wantOK: true,
			want: Socket{Addr: netip.MustParseAddrPort("[fe80::2ff:fe01:22a]:9090"), UID: 0, Inode: 1 << 32}},
		{name: "lower-case hex", line: strings.Replace(listen4, "0100007F:1F90", "0100007f:1f90", 1), wantOK: true,
			want: Socket{Addr: netip.MustParseAddrPort("127.0.0.1:8080"), UID: 1000, Inode: 12345}},
		{name: "tabs", line: strings.ReplaceAll(listen4, " ", "\t"), wantOK: true,
			want: Socket{Addr: netip.MustParseAddrPort("127.0.0.1:8080"), UID: 1000, Inode: 12345}},
		{name: "header", line: "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"},
		{name: "blank", line: "   "},
		{name: "established", line: strings.Replace(listen4, " 0A ", " 01 ", 1)},
		{name: "time wait with short line", line: "   9: 0100007F:1F90 0100007F:9C40 06 00000000:00000000 03:00000F2A 00000000     0        0 0 3"},
		{name: "truncated listener", line: listen4[:60], wantErr: "columns"},
		{name: "no port", line: strings.Replace(listen4, "0100007F:1F90", "0100007F", 1), wantErr: "no port"},
		{name: "odd address length", line: strings.Replace(listen4, "0100007F:", "100007F:", 1), wantErr: "neither IPv4 nor IPv6"},
		{name: "bad hex", line: strings.Replace(listen4, "0100007F:", "0100G07F:", 1), wantErr: "bad digit"},
		{name: "port too big", line: strings.Replace(listen4, ":1F90", ":11F90", 1), wantErr: "out of range"},
		{name: "uid too big", line: strings.Replace(listen4, " 1000 ", " 4294967296 ", 1), wantErr: "uid"},
		{name: "negative inode", line: strings.Replace(listen4, " 12345 ", " -1 ", 1), wantErr: "inode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, err := parseProcLine([]byte(tt.line))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ok != tt.wantOK || got != tt.want {
				t.Errorf("got %v, %v; want %v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestReadProcNetReportsLine(t *testing.T) {
	in := "  sl  local_address rem_address   st\n   0: 0100007F:1F9 00000000:0000 0A\n"
	_, err := readProcNet(strings.NewReader(in), nil)
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("err = %v, want one naming line 2", err)
	}
}

func FuzzParseProcNet(f *testing.F) {
	for _, name := range []string{"proc_tcp.txt", "proc_tcp6.txt"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("0: 0:0 0 0A 0 0 0 0 0 0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		socks, err := readProcNet(bytes.NewReader(b), nil)
		if err != nil {
			return
		}
		for _, s := range socks {
			if !s.Addr.IsValid() {
				t.Fatalf("invalid address in %+v", s)
			}
		}
	})
}
