package load

import (
	"fmt"
	"strings"
	"testing"

	"github.com/limenhq/limen/gateway/audit"
)

// recorder is a testing.TB that keeps the errors instead of failing.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Helper() {}

// cast is an asciicast v3 recording whose output is marker and lines
// line-1 to line-n, as a terminal shows a non-TTY exec's output.
func cast(marker string, n int, cut bool) []byte {
	var b strings.Builder
	b.WriteString(`{"version":3,"term":{"cols":80,"rows":24}}` + "\n")
	fmt.Fprintf(&b, "[0.1,\"o\",\"%s\\r\\n\"]\n", marker)
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "[0.1,\"o\",\"line-%d\\r\\n\"]\n", i)
	}
	if cut {
		b.WriteString(`[0.1,"o","line-`) // a crash inside the last event
	}
	return []byte(b.String())
}

func TestCheckRecordings(t *testing.T) {
	s := Snapshot{Execs: []Exec{
		{Marker: "m-whole", Marked: true, Last: 39},
		{Marker: "m-nothing"}, // saw nothing: needs no recording
	}}
	for _, tc := range []struct {
		name     string
		recs     map[string][]byte
		wantErrs []string
	}{
		{"whole", map[string][]byte{"s1": cast("m-whole", 39, false)}, nil},
		{"more than the client got", map[string][]byte{"s1": cast("m-whole", 40, false)}, nil},
		{"one line short", map[string][]byte{"s1": cast("m-whole", 38, false)}, []string{"holds line-1 to line-38 in order; its client received line-1 to line-39"}},
		{"cut by a crash after the last line", map[string][]byte{"s1": cast("m-whole", 39, true)}, []string{"recording s1: asciicast line 42"}},
		{"missing", map[string][]byte{"s2": cast("other", 3, false)}, []string{"no recording among 1 holds its marker m-whole"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{TB: t}
			CheckRecordings(r, s, tc.recs)
			if len(r.errs) != len(tc.wantErrs) {
				t.Fatalf("errors %q, want %d like %q", r.errs, len(tc.wantErrs), tc.wantErrs)
			}
			for i, w := range tc.wantErrs {
				if !strings.Contains(r.errs[i], w) {
					t.Errorf("error %q, want it to say %q", r.errs[i], w)
				}
			}
		})
	}
}

func TestCheckAudit(t *testing.T) {
	prefix := "/api/v1/namespaces/ns/configmaps/load-"
	ev := func(typ audit.Type, seq int) audit.Event {
		return audit.Event{Type: typ, Kube: &audit.KubeRequest{Method: "GET", Path: fmt.Sprint(prefix, seq)}}
	}
	reqs := []Request{{Seq: 0, OK: true}, {Seq: 1, OK: true}, {Seq: 2}, {Seq: 3, OK: true}}
	evs := []audit.Event{
		ev(audit.TypeKubeSent, 0), ev(audit.TypeKubeRequest, 0),
		ev(audit.TypeKubeSent, 1),                            // no outcome: fine
		ev(audit.TypeKubeSent, 3), ev(audit.TypeKubeSent, 3), // twice
		ev(audit.TypeKubeSent, 12), // a request the client never saw end
	}
	r := &recorder{TB: t}
	f := CheckAudit(r, reqs, evs, prefix)
	if want := (AuditFigures{Requests: 4, Failed: 1, OK: 2, NoOutcome: 1}); f != want {
		t.Errorf("figures %+v, want %+v", f, want)
	}
	if len(r.errs) != 2 || !strings.Contains(r.errs[0], "request 3 stored 2 times") || !strings.Contains(r.errs[1], "holds 2 records") {
		t.Errorf("errors %q, want request 3 stored twice", r.errs)
	}
}

func TestCheckOneEnd(t *testing.T) {
	s := func(typ audit.Type, id, reason string) audit.Event {
		return audit.Event{Type: typ, SessionID: id, Session: &audit.Session{Kind: "kube", Login: "exec", EndReason: reason}}
	}
	r := &recorder{TB: t}
	ends := CheckOneEnd(r, []audit.Event{
		s(audit.TypeSessionStart, "a", ""), s(audit.TypeSessionEnd, "a", audit.EndCompleted),
		s(audit.TypeSessionStart, "b", ""),
		s(audit.TypeSessionStart, "c", ""), s(audit.TypeSessionEnd, "c", audit.EndTunnelClosed), s(audit.TypeSessionEnd, "c", audit.EndClientClosed),
	})
	if len(r.errs) != 2 || !strings.Contains(r.errs[0], "session b") || !strings.Contains(r.errs[1], "session c has 2 session.end") {
		t.Errorf("errors %q, want b without an end and c with two", r.errs)
	}
	if ends["a"].Session.EndReason != audit.EndCompleted {
		t.Errorf("end of a: %+v", ends["a"])
	}
}
