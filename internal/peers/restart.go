package peers

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A peer's own restart policy and rules (Kubernetes' per-container
// restartPolicy and restartPolicyRules, KEP-5307, and the rules' action
// RestartAllContainers, KEP-5532). The kubelet applies them instead of the
// pod's restartPolicy (pkg/api/v1/pod's ContainerShouldRestart): the first
// rule whose exit codes match decides, else the container's policy. The
// downward API cannot give them, so --peer-restart repeats them.

// Action is what a matching rule makes the kubelet do.
type Action string

const (
	// RestartAlone: the kubelet restarts this container alone, in place
	// (the rule's action Restart).
	RestartAlone Action = "Restart"
	// RestartAll: the kubelet stops every container of the pod, init and
	// sidecar ones included, and starts the pod again from its init
	// containers in the same sandbox, emptyDirs kept.
	RestartAll Action = "RestartAllContainers"
)

// Rule is one of a container's restartPolicyRules.
type Rule struct {
	Action Action
	NotIn  bool  // the operator NotIn; else In
	Codes  []int // exit codes, each 0 to 255
}

// Matches reports whether the rule applies to an exit with code, as the
// kubelet's FindMatchingContainerRestartRule matches it.
func (r Rule) Matches(code int) bool {
	return slices.Contains(r.Codes, code) != r.NotIn
}

func (r Rule) String() string {
	op := "In"
	if r.NotIn {
		op = "NotIn"
	}
	codes := make([]string, len(r.Codes))
	for i, c := range r.Codes {
		codes[i] = strconv.Itoa(c)
	}
	return fmt.Sprintf("%s:%s(%s)", r.Action, op, strings.Join(codes, ","))
}

// PeerRestart is one app container's restartPolicy and its rules.
type PeerRestart struct {
	Policy Restart
	Rules  []Rule
}

// Then is what the kubelet does after this peer's exit with code: the
// action of the first rule that matches, else RestartAlone when the
// container's policy restarts it, else "" (it stays exited).
func (pr PeerRestart) Then(code int, succeeded bool) Action {
	for _, r := range pr.Rules {
		if r.Matches(code) {
			return r.Action
		}
	}
	switch {
	case pr.Policy == Always, pr.Policy == OnFailure && !succeeded:
		return RestartAlone
	}
	return ""
}

// EarlierRun reports whether r, a record found when the supervisor of a
// pod's next run after a RestartAllContainers starts, is the earlier run's:
// of the run that the record dated trigger (its Time), whose exit made the
// kubelet restart the pod, ended. The kubelet removes every container of
// the pod before it starts any again, so a client whose container started
// after the trigger was written (Record.Started) is of the next run, and
// its record counts, though it came before any supervisor of that run
// started: an app that the kubelet starts before the proxy and that
// reports with complete. Every other final record is the earlier run's: of
// a container that ran when the trigger came (the kill that restarts the
// pod writes some: exec's signaled 143), or of a client that could not
// tell its container's start (Started zero). A running record never is:
// while its exec lives it holds its lock, and a released one reads as
// lost, a final record that keeps its run's Started.
//
// What it cannot tell: a container that the kubelet restarted alone in the
// second between the trigger and its restart of the pod (its exit came
// first) is taken for the next run's, and so is what it writes before the
// kubelet's kill, or at it.
func EarlierRun(r Record, trigger time.Time) bool {
	return r.Final() && !r.Started.After(trigger)
}

// ParsePeerRestart parses --peer-restart: entries separated by ';', each
// NAME=POLICY followed by its rules, comma separated, each
// ACTION:OPERATOR(CODE,...), as the pod spells them:
//
//	job=Never,Restart:In(42);uploader=OnFailure,RestartAllContainers:In(3,4)
//
// Errors fit on one line; the caller names the flag.
func ParsePeerRestart(s string) (map[string]PeerRestart, error) {
	out := map[string]PeerRestart{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, entry := range strings.Split(s, ";") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, rest, ok := strings.Cut(entry, "=")
		name = strings.TrimSpace(name)
		if !ok {
			return nil, fmt.Errorf("%s has no '=': want NAME=POLICY[,ACTION:In|NotIn(CODE,...)...], such as job=Never,Restart:In(42)", quote(entry))
		}
		if err := ValidName(name); err != nil {
			return nil, err
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("peer %q is given twice", name)
		}
		pr, err := parseEntry(rest)
		if err != nil {
			return nil, fmt.Errorf("peer %s: %w", name, err)
		}
		out[name] = pr
	}
	return out, nil
}

func parseEntry(s string) (PeerRestart, error) {
	policy, rules, _ := strings.Cut(s, ",")
	pr := PeerRestart{Policy: Restart(strings.TrimSpace(policy))}
	if !slices.Contains(Restarts, pr.Policy) {
		return pr, fmt.Errorf("restart policy %s: want Never, OnFailure or Always", quote(string(pr.Policy)))
	}
	for rules = strings.TrimSpace(rules); rules != ""; {
		open := strings.IndexByte(rules, '(')
		end := strings.IndexByte(rules, ')')
		if open < 0 || end < open {
			return pr, fmt.Errorf("rule %s: want ACTION:In(CODE,...) or ACTION:NotIn(CODE,...)", quote(rules))
		}
		r, err := parseRule(strings.TrimSpace(rules[:open]), rules[open+1:end])
		if err != nil {
			return pr, err
		}
		pr.Rules = append(pr.Rules, r)
		rules = strings.TrimSpace(rules[end+1:])
		if rules != "" {
			var ok bool
			if rules, ok = strings.CutPrefix(rules, ","); !ok {
				return pr, fmt.Errorf("%s after a rule: separate rules with ','", quote(rules))
			}
			rules = strings.TrimSpace(rules)
		}
	}
	return pr, nil
}

func parseRule(head, codes string) (Rule, error) {
	action, op, _ := strings.Cut(head, ":")
	r := Rule{Action: Action(strings.TrimSpace(action))}
	switch r.Action {
	case RestartAlone, RestartAll:
	default:
		return r, fmt.Errorf("rule action %s: want Restart or RestartAllContainers", quote(string(r.Action)))
	}
	switch strings.TrimSpace(op) {
	case "In":
	case "NotIn":
		r.NotIn = true
	default:
		return r, fmt.Errorf("rule %s: operator %s: want In or NotIn", r.Action, quote(op))
	}
	// No codes is a rule the API takes (values is optional): In() matches
	// no exit, NotIn() every one, as in the kubelet.
	if strings.TrimSpace(codes) == "" {
		return r, nil
	}
	for _, c := range strings.Split(codes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || ValidCode(n) != nil {
			return r, fmt.Errorf("rule %s: exit code %s: want a decimal integer from 0 to 255", r.Action, quote(strings.TrimSpace(c)))
		}
		r.Codes = append(r.Codes, n)
	}
	return r, nil
}
