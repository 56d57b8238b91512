package peers

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Restart is the pod's restartPolicy, which the downward API cannot give a
// container: what the kubelet does when an app container exits, and so
// which exits are final.
type Restart string

const (
	// Never (Jobs): any final record is final, and a failure ends the job.
	Never Restart = "Never"
	// OnFailure (Jobs): the kubelet restarts a failed app in the same pod
	// and it needs the proxy, so only a success is final.
	OnFailure Restart = "OnFailure"
	// Always (Deployments, StatefulSets, DaemonSets): the kubelet restarts
	// every app that exits, so no exit is final; an exit only tells a drain
	// that the app has ended.
	Always Restart = "Always"
)

// Restarts are the restart policies, in the pod's spelling.
var Restarts = []Restart{Never, OnFailure, Always}

// Policy decides what a set of records means. It is the whole of
// --peers, --restart-policy and --native-sidecar.
type Policy struct {
	// Count is the number of distinct peers that must each end, used when
	// Names is empty. Less than 1 counts as 1.
	Count int
	// Names lists the peers explicitly. Records of other names are ignored
	// by Decide and refused by Accepts.
	Names []string
	// Restart is --restart-policy; empty means Never.
	Restart Restart
	// Native is --native-sidecar: the kubelet would only restart a sidecar
	// that exits, so a settled policy never stops the proxy (Verdict.Done
	// stays false) and SIGTERM is the way out. Verdict.Settled still tells
	// a drain that every peer has ended.
	Native bool
	// Peers are the peers' own restart policies and rules
	// (--peer-restart), which the kubelet follows instead of Restart.
	Peers map[string]PeerRestart
	// Superseded: a final record of a name dated at or before its time
	// here is an earlier run of the pod's (before a RestartAllContainers)
	// and counts as no record at all.
	Superseded map[string]time.Time
}

// outcome is what one record means for the verdict.
type outcome int

const (
	awaited  outcome = iota // running, or the kubelet runs the peer again
	ended                   // final: the kubelet leaves the peer exited
	restarts                // the kubelet restarts the whole pod
)

// Then is what the kubelet does after name's final record r: by the
// peer's own rules and policy when --peer-restart gives them, else by the
// pod's restartPolicy.
func (p Policy) Then(name string, r Record) Action {
	if pr, ok := p.Peers[name]; ok {
		return pr.Then(r.ExitCode, r.Succeeded())
	}
	return PeerRestart{Policy: cmp.Or(p.Restart, Never)}.Then(r.ExitCode, r.Succeeded())
}

// outcome reads r as the kubelet will act on its exit code. Under the pod's
// Always, an exit of a peer without rules of its own still ends it, for the
// drain: no exit settles the verdict there anyway.
func (p Policy) outcome(name string, r Record) outcome {
	_, own := p.Peers[name]
	switch {
	case r.Running:
		return awaited
	case !own && p.Restart == Always:
		return ended
	}
	switch p.Then(name, r) {
	case RestartAll:
		return restarts
	case RestartAlone:
		return awaited
	}
	return ended
}

// OfEarlierRun reports whether name's record r is an earlier run's of the
// pod (Superseded dates it), which counts as no record.
func (p Policy) OfEarlierRun(name string, r Record) bool {
	t, ok := p.Superseded[name]
	return ok && r.Final() && !r.Time.After(t)
}

// Restarts reports whether recs hold a record that makes the kubelet
// restart the whole pod (a RestartAllContainers rule matched), and whose.
func (p Policy) Restarts(recs map[string]Record) (string, bool) {
	for _, name := range slices.Sorted(maps.Keys(recs)) {
		if r := recs[name]; !p.OfEarlierRun(name, r) && p.outcome(name, r) == restarts {
			return name, true
		}
	}
	return "", false
}

// ParsePeers parses --peers: a count ("1", "3") or a comma list of names
// ("job,uploader"). With names, count is their number.
func ParsePeers(s string) (count int, names []string, err error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil, errors.New(`--peers: empty; give a count ("1") or a comma list of names ("job,uploader")`)
	}
	if digits := strings.TrimLeft(s, "+-"); digits != "" && strings.Trim(digits, "0123456789") == "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return 0, nil, fmt.Errorf("--peers: count %s is out of range", quote(s))
		}
		if n < 1 {
			return 0, nil, fmt.Errorf("--peers: count must be at least 1, got %d", n)
		}
		return n, nil, nil
	}
	for n := range strings.SplitSeq(s, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			return 0, nil, fmt.Errorf("--peers: empty name in %s", quote(s))
		}
		if err := ValidName(n); err != nil {
			return 0, nil, fmt.Errorf("--peers: %w", err)
		}
		if slices.Contains(names, n) {
			return 0, nil, fmt.Errorf("--peers: %q is listed twice", n)
		}
		names = append(names, n)
	}
	return len(names), names, nil
}

// Accepts checks a name a peer reports under: it must be valid, and listed
// when the policy lists names.
func (p Policy) Accepts(name string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	if len(p.Names) > 0 && !slices.Contains(p.Names, name) {
		return fmt.Errorf("unknown peer %q: --peers lists %s", name, strings.Join(p.Names, ","))
	}
	return nil
}

// Verdict is what a set of records means under a policy.
type Verdict struct {
	// Done: the policy is settled and the proxy must stop. Never with
	// Policy.Native or under Always.
	Done bool
	// Settled: every expected peer has succeeded, or a failure ended it
	// (under Always: every expected peer has ended, however). Like Done,
	// but also under Policy.Native and Always, where it only means the
	// peers are gone (a drain need not wait for them).
	Settled bool
	// Code is the exit code once settled: 0 when every expected peer
	// succeeded, else the code of the failed peer.
	Code int
	// Failed names the failed peer that settled it, if one did; Reason
	// says how that peer ended, and Stop whether it was stopped from
	// outside first (exec forwarded it a stop signal).
	Failed string
	Reason Reason
	Stop   Stop
	// Failures names, in the order they ended, the failed peers among
	// those that settled the policy under Always, where a failure fixes no
	// code: the peers ended, but not all of them well.
	Failures []string
	// Pending lists, sorted, the known peers still awaited: running ones,
	// listed ones with no record, and failed ones under OnFailure. Nil once
	// settled. With Count, peers that have written nothing yet have no name
	// to list, so Awaiting may be larger.
	Pending []string
	// Awaiting is how many expected peers have yet to succeed; 0 once
	// settled.
	Awaiting int
	// PodRestart names the peer whose exit makes the kubelet restart every
	// container of the pod (a RestartAllContainers rule). Then nothing of
	// this run of the pod is final: Settled (a drain waits for nobody, the
	// kubelet kills everyone) but not Done (the restarted app needs a
	// proxy, which the kubelet restarts too).
	PodRestart string
}

// Decide reads the latest record of each peer (the map holds one per name,
// so a repeated report has replaced the earlier one). The policy needs
// Count distinct names, or every listed name, to succeed; a running record
// is never final.
//
// Each record is read as the kubelet acts on its exit code: by the peer's
// own restart policy and rules (Peers) when given, else by the pod's
// (Restart). A peer the kubelet restarts alone (a Restart rule, its own
// OnFailure or Always) stays pending; one whose exit restarts the whole pod
// (a RestartAllContainers rule) makes the verdict a PodRestart at once.
// Records that Superseded dates to an earlier run of the pod count as none.
//
// Under Never, a failed record settles the policy with that peer's code.
// Records are taken in time order and the first decisive one wins, as the
// supervisor would have seen them arrive: the earliest failure, unless
// enough peers had succeeded before it (with Count, more names may report
// than are expected).
func (p Policy) Decide(recs map[string]Record) Verdict {
	need := max(p.Count, 1)
	if len(p.Names) > 0 {
		need = len(p.Names)
	}
	var ends []Record
	var pending []string
	for _, name := range slices.Sorted(maps.Keys(recs)) {
		if len(p.Names) > 0 && !slices.Contains(p.Names, name) {
			continue
		}
		r := recs[name]
		r.Name = name
		switch {
		case p.OfEarlierRun(name, r):
			if len(p.Names) == 0 {
				continue // with Count, a peer with no record has no name
			}
			pending = append(pending, name)
		case p.outcome(name, r) == ended:
			ends = append(ends, r)
		case p.outcome(name, r) == restarts:
			return Verdict{Settled: true, PodRestart: name, Code: r.ExitCode}
		default:
			pending = append(pending, name)
		}
	}
	// Names are unique, so the order is total and need not be stable. An
	// insertion sort: a pod has a few peers, and neither a generic sort
	// (compiled anew for each element type, 6 KB of the binary for Record
	// alone) nor package sort is worth linking for them.
	for i := 1; i < len(ends); i++ {
		for j := i; j > 0 && cmp.Or(ends[j].Time.Compare(ends[j-1].Time), strings.Compare(ends[j].Name, ends[j-1].Name)) < 0; j-- {
			ends[j], ends[j-1] = ends[j-1], ends[j]
		}
	}

	v := Verdict{}
	ok := 0
	for _, r := range ends {
		if r.Failed() && p.Restart != Always {
			v.Settled, v.Failed, v.Reason, v.Code, v.Stop = true, r.Name, r.Reason, r.ExitCode, r.Stop
			if v.Code == 0 {
				v.Code = 1 // a failure must never read as success
			}
			break
		}
		if r.Failed() {
			v.Failures = append(v.Failures, r.Name)
		}
		if ok++; ok == need {
			v.Settled = true
			break
		}
	}
	v.Done = v.Settled && !p.Native && p.Restart != Always
	if v.Settled {
		return v
	}
	v.Failures = nil
	for _, name := range p.Names {
		if _, ok := recs[name]; !ok {
			pending = append(pending, name)
		}
	}
	slices.Sort(pending)
	v.Pending = pending
	v.Awaiting = need - ok
	return v
}

// Why says what settled v, for the log: it must never call a failed peer a
// success, under Always included.
func (v Verdict) Why() string {
	switch {
	case v.Failed != "":
		return fmt.Sprintf("peer %s failed with code %d", v.Failed, v.Code)
	case len(v.Failures) > 0:
		return fmt.Sprintf("every peer ended; failed: %s", strings.Join(v.Failures, ","))
	case v.PodRestart != "":
		return fmt.Sprintf("peer %s exited with %d, which restarts every container of the pod (RestartAllContainers)", v.PodRestart, v.Code)
	}
	return "every peer succeeded"
}
