package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/proxy-supervisor/proxy-supervisor/internal/control"
	"github.com/proxy-supervisor/proxy-supervisor/internal/http1"
	"github.com/proxy-supervisor/proxy-supervisor/internal/peers"
)

// EnvPrefix starts the environment variable of every flag:
// --drain-min is also PROXY_SUPERVISOR_DRAIN_MIN. A flag on the command line
// wins over its variable.
const EnvPrefix = "PROXY_SUPERVISOR_"

// envName is the variable that backs a flag.
func envName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// usageError is bad flags or usage: exit 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// flags is a flag set whose flags also read the environment and whose help
// shows each flag's variable and default.
type flags struct {
	fs       *flag.FlagSet
	synopsis string
	about    string
	check    *bool
}

// checkFlag validates a command line without acting on it, like nginx -t:
// manifests are tested with it. The environment never sets it, so that a
// stray variable cannot turn a proxy container into a no-op.
const checkFlag = "check"

func newFlags(name, synopsis, about string) *flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are ours to print, on one line
	check := fs.Bool(checkFlag, false, "validate the flags and arguments, then exit without acting: 0 and no output when fine, 2 and the error otherwise (not read from the environment)")
	return &flags{fs: fs, synopsis: synopsis, about: about, check: check}
}

// checkOnly reports whether --check was given: the command returns 0 once
// it has validated everything it would validate before acting.
func (f *flags) checkOnly() bool { return *f.check }

// parse reads args, then the environment for every flag not given. It
// returns flag.ErrHelp for -h/--help.
func (f *flags) parse(args []string, getenv func(string) string) ([]string, error) {
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, usagef("%s: %s", f.fs.Name(), dashed(err.Error()))
	}
	given := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	var err error
	f.fs.VisitAll(func(fl *flag.Flag) {
		if given[fl.Name] || err != nil || fl.Name == checkFlag {
			return
		}
		if v := getenv(envName(fl.Name)); v != "" {
			if e := f.fs.Set(fl.Name, v); e != nil {
				err = usagef("%s: --%s from %s=%q: %v", f.fs.Name(), fl.Name, envName(fl.Name), v, e)
			}
		}
	})
	return f.fs.Args(), err
}

// dashed makes the flag package's messages name flags the way they are
// documented, with two dashes. Only the dash before the flag's name is
// doubled, never one inside a quoted value.
func dashed(msg string) string {
	for _, p := range []string{"flag provided but not defined: -", "flag needs an argument: -"} {
		if rest, ok := strings.CutPrefix(msg, p); ok {
			return p + "-" + rest
		}
	}
	for _, p := range []string{"invalid value ", "invalid boolean value "} {
		rest, ok := strings.CutPrefix(msg, p)
		if !ok {
			continue
		}
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return msg
		}
		for _, mid := range []string{" for flag -", " for -"} {
			if tail, ok := strings.CutPrefix(rest[len(q):], mid); ok {
				return p + q + mid + "-" + tail
			}
		}
	}
	return msg
}

// given reports whether a flag was set on the command line or through its
// variable.
func (f *flags) given(name string, getenv func(string) string) bool {
	return f.explicit(name) || getenv(envName(name)) != ""
}

// explicit reports whether a flag was given on the command line.
func (f *flags) explicit(name string) bool {
	set := false
	f.fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == name })
	return set
}

// usage writes the help text.
func (f *flags) usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: proxy-supervisor %s\n\n%s\n", f.synopsis, f.about)
	var all []*flag.Flag
	f.fs.VisitAll(func(fl *flag.Flag) { all = append(all, fl) })
	if len(all) == 0 {
		return
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	fmt.Fprintln(w, "\nFlags (each also read from its environment variable; a flag wins):")
	for _, fl := range all {
		arg, help := flag.UnquoteUsage(fl)
		if _, ok := fl.Value.(boolFlag); ok {
			arg = ""
		}
		if fl.Name == checkFlag {
			fmt.Fprintf(w, "  --%s\n      %s\n", fl.Name, help)
			continue
		}
		fmt.Fprintf(w, "  --%s %s\n      %s\n      env %s", fl.Name, arg, help, envName(fl.Name))
		if fl.DefValue != "" {
			fmt.Fprintf(w, ", default %s", fl.DefValue)
		}
		fmt.Fprintln(w)
	}
}

type boolFlag interface{ IsBoolFlag() bool }

// portList is a comma list of TCP ports, such as 8080,9090.
type portList []uint16

func (p *portList) String() string {
	var s []string
	for _, v := range *p {
		s = append(s, strconv.Itoa(int(v)))
	}
	return strings.Join(s, ",")
}

func (p *portList) Set(v string) error {
	*p = nil
	for _, f := range splitList(v) {
		n, err := http1.ParsePort(f)
		if err != nil {
			return err
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

func (u *uidList) Set(v string) error {
	*u = nil
	for _, f := range splitList(v) {
		// 4294967295 is (uid_t)-1, which no process has: chown's "no change".
		n, err := strconv.ParseUint(f, 10, 32)
		if err != nil || n == 1<<32-1 {
			return fmt.Errorf("%q is not a uid", f)
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

func (o *optionalUID) Set(v string) error {
	n, err := strconv.ParseUint(v, 10, 31)
	if err != nil {
		return fmt.Errorf("%q is not a uid", v)
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

func (c *choice) Set(v string) error {
	for _, a := range c.allowed {
		if v == a {
			c.val = v
			return nil
		}
	}
	return fmt.Errorf("%q: want one of %s", v, strings.Join(c.allowed, ", "))
}

func splitList(v string) []string {
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// positive checks that a duration flag is above zero.
func positive(name string, d time.Duration) error {
	if d <= 0 {
		return usagef("--%s: must be above zero, got %v", name, d)
	}
	return nil
}

// exitCode is an exit code: a decimal integer from 0 to 255, read the way
// the control socket reads exit_code (010 is 10, 0x10 is refused), so that
// a code means the same whichever way it is reported.
type exitCode int

func (c *exitCode) String() string { return strconv.Itoa(int(*c)) }

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
type listenAddr string

func (a *listenAddr) String() string { return string(*a) }

func (a *listenAddr) Set(v string) error {
	if v == "" {
		*a = ""
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
	if _, err := http1.ParsePort(port); err != nil {
		return err
	}
	*a = listenAddr(v)
	return nil
}

// httpURL is the URL of a local plain-HTTP server, as http1.ParseURL
// takes it. what names the server, for the error that refuses https.
type httpURL struct {
	val  string
	what string
}

func (u *httpURL) String() string { return u.val }

func (u *httpURL) Set(v string) error {
	_, err := http1.ParseURL(v)
	if errors.Is(err, http1.ErrHTTPS) {
		return fmt.Errorf("%w: the URL is %s, which is plain HTTP", err, u.what)
	}
	if err != nil {
		return err
	}
	u.val = v
	return nil
}

// controlDir is the shared emptyDir. sock/control.sock must fit a unix socket
// address there, or no client could ever reach the supervisor; that is a
// bad flag, not something to find out at the timeout.
type controlDir string

func (d *controlDir) String() string { return string(*d) }

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
