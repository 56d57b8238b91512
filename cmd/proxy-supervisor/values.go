package main

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/http1"
	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
)

// The flag.Value types of the commands' flags: each parses and checks one
// form of value, and names that form in the help.

// text is a string flag whose form the help names, such as NAME.
type text struct {
	val  *string
	form string
}

func (t *text) String() string {
	if t.val == nil {
		return ""
	}
	return *t.val
}

func (t *text) Set(v string) error  { *t.val = v; return nil }
func (t *text) placeholder() string { return t.form }

// text defines a string flag whose value has the given form in the help.
func (f *flags) text(name, def, form, usage string) *string {
	v := def
	f.fs.Var(&text{&v, form}, name, usage)
	return &v
}

// portList is a comma list of TCP ports, such as 8080,9090.
type portList []uint16

func (p *portList) String() string {
	var s []string
	for _, v := range *p {
		s = append(s, strconv.Itoa(int(v)))
	}
	return strings.Join(s, ",")
}

func (p *portList) placeholder() string { return "PORT,..." }

func (p *portList) Set(v string) error {
	*p = nil
	fields, err := splitList(v, "port")
	if err != nil {
		return err
	}
	for _, f := range fields {
		n, err := http1.ParsePort(f)
		if err != nil {
			return fmt.Errorf("%q is not a port; want a comma list of ports from 1 to 65535, such as 8080,9090", f)
		}
		*p = append(*p, n)
	}
	return nil
}

// uidList is a comma list of uids.
type uidList []uint32

func (u *uidList) String() string {
	var s []string
	for _, v := range *u {
		s = append(s, strconv.FormatUint(uint64(v), 10))
	}
	return strings.Join(s, ",")
}

func (u *uidList) placeholder() string { return "UID,..." }

func (u *uidList) Set(v string) error {
	*u = nil
	fields, err := splitList(v, "uid")
	if err != nil {
		return err
	}
	for _, f := range fields {
		// 4294967295 is (uid_t)-1, which no process has: chown's "no change".
		n, err := strconv.ParseUint(f, 10, 32)
		if err != nil || n == 1<<32-1 {
			return fmt.Errorf("%q is not a uid; want a comma list of uids, such as 1000,1337", f)
		}
		*u = append(*u, uint32(n))
	}
	return nil
}

// optionalUID is a uid or unset (-1).
type optionalUID int

func (o *optionalUID) String() string {
	if *o < 0 {
		return ""
	}
	return strconv.Itoa(int(*o))
}

func (o *optionalUID) placeholder() string { return "UID" }

func (o *optionalUID) Set(v string) error {
	n, err := strconv.ParseUint(v, 10, 31)
	if err != nil {
		return errors.New("want a uid, such as 1337")
	}
	*o = optionalUID(n)
	return nil
}

// choice is one of a fixed set of words.
type choice struct {
	val     string
	allowed []string
}

func (c *choice) String() string { return c.val }

func (c *choice) placeholder() string { return strings.Join(c.allowed, "|") }

func (c *choice) Set(v string) error {
	for _, a := range c.allowed {
		if v == a {
			c.val = v
			return nil
		}
	}
	return fmt.Errorf("want one of %s", strings.Join(c.allowed, ", "))
}

// splitList is the entries of a comma list of what. A value that is not
// empty and lists none, such as ",", is an error: it would read as the
// flag not given, which for --allowed-uids trusts every uid.
func splitList(v, what string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	if len(out) == 0 && strings.TrimSpace(v) != "" {
		return nil, fmt.Errorf("lists no %s; give a comma list of them, or an empty value for none", what)
	}
	return out, nil
}

// exitCode is an exit code: a decimal integer from 0 to 255, read the way
// the control socket reads exit_code (010 is 10, 0x10 is refused), so that
// a code means the same whichever way it is reported.
type exitCode int

func (c *exitCode) String() string { return strconv.Itoa(int(*c)) }

func (c *exitCode) placeholder() string { return "CODE" }

func (c *exitCode) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || peers.ValidCode(n) != nil {
		return errors.New("want a decimal integer from 0 to 255")
	}
	*c = exitCode(n)
	return nil
}

// listenAddr is a TCP address to listen on, host:port with a numeric port
// from 1 to 65535, or empty for off. A bad one is refused with the flags,
// not found out by the listener after the proxy has started.
type listenAddr struct {
	addr string
	port uint16 // 0: off
}

func (a *listenAddr) String() string { return a.addr }

func (a *listenAddr) placeholder() string { return "HOST:PORT" }

func (a *listenAddr) Set(v string) error {
	if v == "" {
		*a = listenAddr{}
		return nil
	}
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		return errors.New("want HOST:PORT, such as :15022 or 127.0.0.1:15022")
	}
	if host != "" { // every address
		if err := http1.CheckHost(host); err != nil {
			return err
		}
	}
	n, err := http1.ParsePort(port)
	if err != nil {
		return err
	}
	*a = listenAddr{v, n}
	return nil
}

// httpURL is the URL of a local plain-HTTP server, parsed once, here, by
// http1.ParseURL. what names the server, for the error that refuses https.
type httpURL struct {
	url  http1.URL // zero: none given
	what string
	unix bool // unix:///PATH is taken too: HTTP over a unix socket
}

// newHTTPURL is an httpURL flag's value, def its default ("" for none).
func newHTTPURL(def, what string, unix bool) *httpURL {
	u := &httpURL{what: what, unix: unix}
	if def != "" {
		if err := u.Set(def); err != nil {
			panic(err) // a default of ours that we refuse
		}
	}
	return u
}

func (u *httpURL) String() string { return u.url.Raw }

func (u *httpURL) Set(v string) error {
	p, err := http1.ParseURL(v)
	if errors.Is(err, http1.ErrHTTPS) {
		return fmt.Errorf("%w: the URL is %s, which is plain HTTP", err, u.what)
	}
	if errors.Is(err, http1.ErrScheme) && !u.unix {
		return errors.New("want http://HOST:PORT")
	}
	if err != nil {
		return err
	}
	if p.Network == "unix" && !u.unix {
		return errors.New("want http://HOST:PORT")
	}
	u.url = p
	return nil
}

// controlDir is the shared emptyDir. sock/control.sock must fit a unix socket
// address there, or no client could ever reach the supervisor; that is a
// bad flag, not something to find out at the timeout.
type controlDir string

func (d *controlDir) String() string { return string(*d) }

func (d *controlDir) placeholder() string { return "DIR" }

func (d *controlDir) Set(v string) error {
	if v == "" {
		return errors.New("empty; want the directory of the shared volume")
	}
	if err := control.CheckSocketPath(v); err != nil {
		return err
	}
	*d = controlDir(v)
	return nil
}

// controlDirFlag defines --control-dir with its default.
func controlDirFlag(f *flags, usage string) *string {
	d := controlDir(DefaultControlDir)
	f.fs.Var(&d, "control-dir", usage)
	return (*string)(&d)
}

// peerRestarts is --peer-restart: each app container's own restartPolicy
// and restartPolicyRules, in the pod's words.
type peerRestarts map[string]peers.PeerRestart

func (p *peerRestarts) String() string {
	var out []string
	for _, name := range p.names() {
		e := (*p)[name]
		s := name + "=" + string(e.Policy)
		for _, r := range e.Rules {
			s += "," + r.String()
		}
		out = append(out, s)
	}
	return strings.Join(out, ";")
}

// names are the peers given, sorted (slices.Sort of a []string, which the
// binary has already: a generic sort of a map's keys, slices.Sorted, costs
// an instantiation of its own).
func (p *peerRestarts) names() []string {
	names := make([]string, 0, len(*p))
	for name := range *p {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func (p *peerRestarts) placeholder() string { return "RULES" }

func (p *peerRestarts) Set(v string) error {
	m, err := peers.ParsePeerRestart(v)
	if err != nil {
		return err
	}
	if len(m) == 0 && strings.TrimSpace(v) != "" {
		// ";" would read as the flag not given.
		return errors.New("lists no entry; want NAME=POLICY[,RULE...] entries separated by ';', or an empty value for none")
	}
	*p = m
	return nil
}
