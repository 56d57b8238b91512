package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// EnvPrefix starts the environment variable of every flag:
// --drain-min is also PROXY_SUPERVISOR_DRAIN_MIN. A flag on the command line
// wins over its variable.
const EnvPrefix = "PROXY_SUPERVISOR_"

// envName is the variable that backs a flag that means the same in every
// command that has it (--control-dir): one variable in a pod's env then
// serves them all.
func envName(flagName string) string {
	return EnvPrefix + envWord(flagName)
}

func envWord(s string) string { return strings.ToUpper(strings.ReplaceAll(s, "-", "_")) }

// perCommand reports whether a flag's meaning and default differ from
// command to command: --timeout is exec's wait for the proxy (10m), wait's
// (1m) and prestop's hold (25s). Each command then reads a variable of its
// own, PROXY_SUPERVISOR_WAIT_TIMEOUT: one set in a pod's env for a
// postStart wait would otherwise reach every exec run there too.
func perCommand(flagName string) bool { return flagName == "timeout" }

// env is the variable that backs a flag of this command.
func (f *flags) env(flagName string) string {
	if perCommand(flagName) {
		return EnvPrefix + envWord(f.fs.Name()) + "_" + envWord(flagName)
	}
	return envName(flagName)
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
	// onCommandLine is what parse found on the command line, as opposed
	// to set from its variable: fs.Visit cannot tell them apart, since
	// the variables are set through fs.Set.
	onCommandLine map[string]bool
	// warnings are parse's lines for stderr: a variable read that is
	// going away.
	warnings []string
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
	f.fs.VisitAll(func(fl *flag.Flag) {
		if _, ok := fl.Value.(explained); !ok {
			fl.Value = explained{fl.Value}
		}
	})
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, usagef("%s: %s", f.fs.Name(), f.reworded(err.Error()))
	}
	given := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	f.onCommandLine = given
	var err error
	f.fs.VisitAll(func(fl *flag.Flag) {
		if given[fl.Name] || err != nil || fl.Name == checkFlag {
			return
		}
		own, shared := f.env(fl.Name), envName(fl.Name)
		name, v := own, getenv(own)
		if v == "" && own != shared {
			// Read until a later release, as before this command had a
			// variable of its own, and said, since it reaches every
			// command that has the flag.
			if v = getenv(shared); v != "" {
				name = shared
				f.warnings = append(f.warnings, fmt.Sprintf("proxy-supervisor: %s: %s is read as %s until a later release; set that instead: --%s means something else in each command", f.fs.Name(), shared, own, fl.Name))
			}
		}
		if v != "" {
			if e := f.fs.Set(fl.Name, v); e != nil {
				err = usagef("%s: invalid value %q for --%s (from %s): %v", f.fs.Name(), v, fl.Name, name, e)
			}
		}
	})
	return f.fs.Args(), err
}

// explained gives a bad value of the flag package's own types an error that
// names the form it wants: the package says only "parse error".
type explained struct{ flag.Value }

func (e explained) Set(v string) error {
	err := e.Value.Set(v)
	if err == nil {
		return nil
	}
	g, ok := e.Value.(flag.Getter)
	if !ok {
		return err
	}
	switch g.Get().(type) {
	case time.Duration:
		return errors.New("want a duration such as 5s or 300ms")
	case bool:
		return errors.New("want true or false")
	}
	return err
}

func (e explained) IsBoolFlag() bool {
	b, ok := e.Value.(boolFlag)
	return ok && b.IsBoolFlag()
}

// reworded makes the flag package's messages read like ours: a flag named
// with two dashes, as documented, and an unknown flag pointing at --help.
func (f *flags) reworded(msg string) string {
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		var names []string
		f.fs.VisitAll(func(fl *flag.Flag) { names = append(names, fl.Name) })
		return fmt.Sprintf("unknown flag --%s%s (proxy-supervisor %s --help lists the flags)", name, didYouMean("--", strings.TrimLeft(name, "-"), names), f.fs.Name())
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		if fl := f.fs.Lookup(name); fl != nil {
			return fmt.Sprintf("--%s needs a value: %s", name, placeholder(fl))
		}
	}
	return dashed(msg)
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
				return "invalid value " + q + " for --" + tail
			}
		}
	}
	return msg
}

// given reports whether a flag was set on the command line or through its
// variable.
func (f *flags) given(name string, getenv func(string) string) bool {
	// The shared variable too, as parse reads it for a per-command flag.
	return f.explicit(name) || getenv(f.env(name)) != "" || perCommand(name) && getenv(envName(name)) != ""
}

// explicit reports whether a flag was given on the command line, not
// only through its variable: a container's environment may set a
// variable for every command it runs (PROXY_SUPERVISOR_CONTROL_DIR), and
// that is a default, which an explicit flag overrides without a conflict.
func (f *flags) explicit(name string) bool { return f.onCommandLine[name] }

// usage writes the help text.
func (f *flags) usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: proxy-supervisor %s\n\n%s\n", f.synopsis, f.about)
	var all []*flag.Flag
	f.fs.VisitAll(func(fl *flag.Flag) { all = append(all, fl) }) // in lexicographical order
	if len(all) == 0 {
		return
	}
	fmt.Fprintln(w, "\nFlags (each also read from its environment variable; a flag wins):")
	for _, fl := range all {
		_, help := flag.UnquoteUsage(fl)
		fmt.Fprintf(w, "  --%s", fl.Name)
		if p := placeholder(fl); p != "" {
			fmt.Fprintf(w, " %s", p)
		}
		fmt.Fprintf(w, "\n      %s\n", help)
		if fl.Name == checkFlag {
			continue
		}
		fmt.Fprintf(w, "      env %s", f.env(fl.Name))
		if fl.DefValue != "" {
			fmt.Fprintf(w, ", default %s", fl.DefValue)
		}
		fmt.Fprintln(w)
	}
}

// placeholder names the form of a flag's value in the help, in one style
// for every command: an upper-case word (DURATION, DIR, URL, HOST:PORT,
// NAME), a list as ITEM,..., a fixed set as its words joined by |. A bool
// flag has none. It comes from the value's type, or from a word of the
// usage in backquotes, the flag package's way.
func placeholder(fl *flag.Flag) string {
	v := fl.Value
	if e, ok := v.(explained); ok {
		v = e.Value
	}
	if p, ok := v.(interface{ placeholder() string }); ok {
		return p.placeholder()
	}
	if b, ok := v.(boolFlag); ok && b.IsBoolFlag() {
		return ""
	}
	if g, ok := v.(flag.Getter); ok {
		if _, ok := g.Get().(time.Duration); ok {
			return "DURATION"
		}
	}
	name, _ := flag.UnquoteUsage(&flag.Flag{Name: fl.Name, Usage: fl.Usage, Value: v})
	return strings.ToUpper(name)
}

type boolFlag interface{ IsBoolFlag() bool }

// positive checks that a duration flag is above zero.
func positive(name string, d time.Duration) error {
	if d <= 0 {
		return usagef("--%s: must be above zero, got %v", name, d)
	}
	return nil
}

// didYouMean is ": did you mean PREFIXNAME?" for the one of names nearest
// to s, a likely misspelling of it: at most two edits away (a third of s's
// length, for a short one), and nearer than every other; "" when none is.
func didYouMean(prefix, s string, names []string) string {
	best, bestD, tie := "", min(2, max(1, len(s)/3))+1, false
	for _, n := range names {
		switch d := edits(s, n); {
		case d < bestD:
			best, bestD, tie = n, d, false
		case d == bestD:
			tie = true
		}
	}
	if tie || best == "" {
		return ""
	}
	return ": did you mean " + prefix + best + "?"
}

// edits is the Levenshtein distance between a and b, in bytes.
func edits(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
