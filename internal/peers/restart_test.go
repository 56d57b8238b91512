package peers

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParsePeerRestart(t *testing.T) {
	in42 := Rule{Action: RestartAlone, Codes: []int{42}}
	tests := []struct {
		in   string
		want map[string]PeerRestart
		err  string // substring of the error; empty: success
	}{
		{in: "", want: map[string]PeerRestart{}},
		{in: "job=Never", want: map[string]PeerRestart{"job": {Policy: Never}}},
		{in: "job=Never,Restart:In(42)", want: map[string]PeerRestart{"job": {Policy: Never, Rules: []Rule{in42}}}},
		{in: " job = Never , Restart : In ( 42 ) ;", want: map[string]PeerRestart{"job": {Policy: Never, Rules: []Rule{in42}}}},
		{
			in: "job=Never,Restart:In(42),RestartAllContainers:NotIn(0, 1);uploader=OnFailure",
			want: map[string]PeerRestart{
				"job":      {Policy: Never, Rules: []Rule{in42, {Action: RestartAll, NotIn: true, Codes: []int{0, 1}}}},
				"uploader": {Policy: OnFailure},
			},
		},
		{in: "job", err: "no '='"},
		{in: "Job=Never", err: "lowercase"},
		{in: "job=never", err: "want Never, OnFailure or Always"},
		{in: "job=Never;job=Always", err: "given twice"},
		{in: "job=Never,Restart:In(256)", err: "exit code \"256\""},
		{in: "job=Never,Restart:In(),RestartAllContainers:NotIn( )", want: map[string]PeerRestart{"job": {Policy: Never, Rules: []Rule{{Action: RestartAlone}, {Action: RestartAll, NotIn: true}}}}},
		{in: "job=Never,Restart:In(42,)", err: "exit code \"\""},
		{in: "job=Never,Restart:In(0x2a)", err: "decimal"},
		{in: "job=Never,Restart:Equals(42)", err: "want In or NotIn"},
		{in: "job=Never,Restart(42)", err: "want In or NotIn"},
		{in: "job=Never,Stop:In(42)", err: "want Restart or RestartAllContainers"},
		{in: "job=Never,Restart:In(42", err: "want ACTION:In(CODE,...)"},
		{in: "job=Never,Restart:In(42)x", err: "separate rules with ','"},
	}
	for _, tt := range tests {
		got, err := ParsePeerRestart(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || strings.Contains(err.Error(), "\n") {
				t.Errorf("ParsePeerRestart(%q) = %v, want a one-line error with %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParsePeerRestart(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

// The kubelet takes the first rule that matches, then the container's own
// policy (pkg/api/v1/pod's ContainerShouldRestart).
func TestPeerRestartThen(t *testing.T) {
	pr := PeerRestart{Policy: Never, Rules: []Rule{
		{Action: RestartAll, Codes: []int{42}},
		{Action: RestartAlone, NotIn: true, Codes: []int{0, 42, 7}},
	}}
	for code, want := range map[int]Action{42: RestartAll, 3: RestartAlone, 0: "", 7: ""} {
		if got := pr.Then(code, code == 0); got != want {
			t.Errorf("Then(%d) = %q, want %q", code, got, want)
		}
	}
	onFailure := PeerRestart{Policy: OnFailure}
	if onFailure.Then(0, true) != "" || onFailure.Then(1, false) != RestartAlone {
		t.Error("a peer's own OnFailure restarts a failure only")
	}
	if (PeerRestart{Policy: Always}).Then(0, true) != RestartAlone {
		t.Error("a peer's own Always restarts a success too")
	}
}

// Of two rules that both match one code, the first decides, whichever
// action each has: the kubelet's FindMatchingContainerRestartRule returns
// at the first match. (TestPeerRestartThen's two rules never both match one
// code, so a last match deciding passed it.)
func TestPeerRestartFirstMatchingRuleDecides(t *testing.T) {
	restart := Rule{Action: RestartAlone, Codes: []int{42}}
	all := Rule{Action: RestartAll, NotIn: true, Codes: []int{0}}
	for _, tt := range []struct {
		rules []Rule
		want  Action
	}{
		{[]Rule{restart, all}, RestartAlone},
		{[]Rule{all, restart}, RestartAll},
	} {
		pr := PeerRestart{Policy: Never, Rules: tt.rules}
		if !tt.rules[0].Matches(42) || !tt.rules[1].Matches(42) {
			t.Fatalf("rules %v: not both matching 42", tt.rules)
		}
		if got := pr.Then(42, false); got != tt.want {
			t.Errorf("rules %v: Then(42) = %q, want the first rule's %q", tt.rules, got, tt.want)
		}
	}
}

// The verdict follows each peer's own policy and rules, not the pod's.
func TestDecideFollowsPeerRules(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(1700000000+int64(s), 0) }
	rec := func(code, s int) Record { return Record{ExitCode: code, Reason: Exited, Time: at(s)} }
	running := Record{Running: true, Time: at(5)}
	restartOn42 := map[string]PeerRestart{"job": {Policy: Never, Rules: []Rule{{Action: RestartAlone, Codes: []int{42}}}}}
	allOn42 := map[string]PeerRestart{"job": {Policy: Never, Rules: []Rule{{Action: RestartAll, Codes: []int{42}}}}}
	never := Policy{Names: []string{"job"}, Restart: Never, Peers: restartOn42}
	tests := []struct {
		name string
		p    Policy
		recs map[string]Record
		want Verdict
	}{
		{"a Never peer whose code matches a Restart rule stays pending", never,
			map[string]Record{"job": rec(42, 1)}, Verdict{Pending: []string{"job"}, Awaiting: 1}},
		{"its second run's success ends it", never,
			map[string]Record{"job": rec(0, 2)}, Verdict{Done: true, Settled: true}},
		{"its second run's other failure ends it with that code", never,
			map[string]Record{"job": rec(3, 2)}, Verdict{Done: true, Settled: true, Code: 3, Failed: "job", Reason: Exited}},
		{"without --peer-restart the pod's Never decides 42", Policy{Names: []string{"job"}},
			map[string]Record{"job": rec(42, 1)}, Verdict{Done: true, Settled: true, Code: 42, Failed: "job", Reason: Exited}},
		{"a peer's own OnFailure under a Never pod keeps a failure pending",
			Policy{Names: []string{"job"}, Peers: map[string]PeerRestart{"job": {Policy: OnFailure}}},
			map[string]Record{"job": rec(1, 1)}, Verdict{Pending: []string{"job"}, Awaiting: 1}},
		{"a peer's own Never under an OnFailure pod settles its failure",
			Policy{Names: []string{"job"}, Restart: OnFailure, Peers: map[string]PeerRestart{"job": {Policy: Never}}},
			map[string]Record{"job": rec(5, 1)}, Verdict{Done: true, Settled: true, Code: 5, Failed: "job", Reason: Exited}},
		{"a RestartAllContainers code restarts the pod: settled for the drain, never done",
			Policy{Names: []string{"job", "uploader"}, Peers: allOn42},
			map[string]Record{"job": rec(42, 2), "uploader": rec(0, 1)}, Verdict{Settled: true, PodRestart: "job", Code: 42}},
		{"under --native-sidecar too", Policy{Names: []string{"job"}, Peers: allOn42, Native: true},
			map[string]Record{"job": rec(42, 2)}, Verdict{Settled: true, PodRestart: "job", Code: 42}},
		{"an earlier run's records count as none",
			Policy{Names: []string{"job", "uploader"}, Peers: allOn42, Superseded: map[string]time.Time{"job": at(2), "uploader": at(3)}},
			map[string]Record{"job": rec(0, 6), "uploader": rec(143, 3)}, Verdict{Pending: []string{"uploader"}, Awaiting: 1}},
		{"and the second run's own codes decide",
			Policy{Names: []string{"job", "uploader"}, Peers: allOn42, Superseded: map[string]time.Time{"job": at(2), "uploader": at(3)}},
			map[string]Record{"job": rec(0, 6), "uploader": rec(4, 7)}, Verdict{Done: true, Settled: true, Code: 4, Failed: "uploader", Reason: Exited}},
		{"a running record is never superseded",
			Policy{Names: []string{"job"}, Peers: allOn42, Superseded: map[string]time.Time{"job": at(9)}},
			map[string]Record{"job": running}, Verdict{Pending: []string{"job"}, Awaiting: 1}},
		{"with a count, a superseded record has no name to list",
			Policy{Count: 1, Peers: allOn42, Superseded: map[string]time.Time{"job": at(2)}},
			map[string]Record{"job": rec(42, 2)}, Verdict{Awaiting: 1}},
	}
	for _, tt := range tests {
		if got := tt.p.Decide(tt.recs); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tt.name, got, tt.want)
		}
	}
	v := Policy{Names: []string{"job"}, Peers: allOn42}.Decide(map[string]Record{"job": rec(42, 2)})
	if why := v.Why(); !strings.Contains(why, "RestartAllContainers") || !strings.Contains(why, "42") {
		t.Errorf("Why() = %q, want the pod's restart and its code", why)
	}
}

// A rule without codes, which the API takes: In() matches no exit, NotIn()
// every one, 0 included (the kubelet's FindMatchingContainerRestartRule).
func TestRuleWithoutCodes(t *testing.T) {
	for _, code := range []int{0, 1, 42, 255} {
		if (Rule{Action: RestartAlone}).Matches(code) {
			t.Errorf("In() matches %d", code)
		}
		if !(Rule{Action: RestartAll, NotIn: true}).Matches(code) {
			t.Errorf("NotIn() does not match %d", code)
		}
	}
}
