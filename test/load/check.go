package load

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/recording"
)

// The invariants every failure scenario checks afterwards: each request a
// client saw succeed is in the audit trail exactly once; no stream ended
// as if it were over, or lost or changed bytes; each exec's recording
// holds every line its client received; each stream has exactly one
// session.end.

// CheckStreams fails t for a stream that ended as if it were over, or that
// lost or changed bytes.
func CheckStreams(t testing.TB, s Snapshot) {
	t.Helper()
	for _, e := range s.ExecEnds {
		if e.Clean {
			t.Errorf("an exec that never ends by itself exited 0 at %s: a cut stream passed for a clean end", e.At.Format(time.StampMilli))
		}
	}
	if len(s.ExecGaps) > 0 {
		t.Errorf("exec output lost or reordered lines: %v", s.ExecGaps)
	}
	if len(s.PFMismatch) > 0 {
		t.Errorf("port-forward delivered changed bytes without an error: %v", s.PFMismatch)
	}
}

// AuditPrefix is the path every GET of the load names, but for its
// sequence number.
func (r *Run) AuditPrefix() string {
	return "/api/v1/namespaces/" + r.cfg.Namespace + "/configmaps/" + r.cfg.Prefix
}

// AuditFigures count what CheckAudit matched.
type AuditFigures struct {
	Requests, Failed int
	// OK is the successes each stored exactly once (kube.sent); NoOutcome
	// those of them without their outcome (kube.request).
	OK, NoOutcome int
}

// CheckAudit matches the requests with the trail's events of the load's
// user (kube.sent and kube.request; others are ignored): each request the
// client saw succeed has exactly one record (kube.sent, durable before the
// response was relayed), and no request has two.
func CheckAudit(t testing.TB, reqs []Request, events []audit.Event, prefix string) AuditFigures {
	t.Helper()
	sent, outcome := map[string]int{}, map[string]int{}
	for _, ev := range events {
		if ev.Kube == nil || !strings.HasPrefix(ev.Kube.Path, prefix) {
			continue
		}
		seq := strings.TrimPrefix(ev.Kube.Path, prefix)
		switch ev.Type {
		case audit.TypeKubeSent:
			sent[seq]++
		case audit.TypeKubeRequest:
			outcome[seq]++
		}
	}
	f := AuditFigures{Requests: len(reqs)}
	for _, r := range reqs {
		seq := strconv.Itoa(r.Seq)
		if !r.OK {
			f.Failed++
		}
		if sent[seq] > 1 || outcome[seq] > 1 {
			t.Errorf("request %d stored %d times (kube.sent) with %d outcomes: once at most", r.Seq, sent[seq], outcome[seq])
		}
		if r.OK && sent[seq] != 1 {
			t.Errorf("request %d succeeded for its client but the audit trail holds %d records of it", r.Seq, sent[seq])
		}
		if r.OK && sent[seq] == 1 {
			f.OK++
			if outcome[seq] == 0 {
				f.NoOutcome++
			}
		}
	}
	return f
}

// RecordingMatch is one exec of the load and its recording.
type RecordingMatch struct {
	Marker    string
	SessionID string
	// ClientLast is the last line the client received; RecordedLast the
	// last the recording holds in an unbroken run from line-1.
	ClientLast, RecordedLast int
}

// CheckRecordings finds the recording of each exec whose client received
// anything among recs (session id → asciicast bytes) and fails t unless it
// holds, in order, every line that client received: output is written to
// the recording before it reaches the user, so even a crash leaves no line
// the user saw unrecorded.
func CheckRecordings(t testing.TB, s Snapshot, recs map[string][]byte) []RecordingMatch {
	t.Helper()
	byMarker := map[string]string{}
	outputs := map[string]string{}
	for id, b := range recs {
		out, err := Output(b)
		if err != nil {
			t.Errorf("recording %s: %v", id, err)
		}
		outputs[id] = out
		if m, _, ok := strings.Cut(out, "\n"); ok || m != "" {
			byMarker[strings.TrimSuffix(m, "\r")] = id
		}
	}
	var matches []RecordingMatch
	for _, e := range s.Execs {
		if !e.Marked && e.Last == 0 {
			continue // the client saw nothing: nothing to hold
		}
		id, ok := byMarker[e.Marker]
		if !ok {
			t.Errorf("the exec started at %s received %s but no recording among %d holds its marker %s",
				e.Start.Format(time.StampMilli), upTo(e.Last), len(recs), e.Marker)
			continue
		}
		m := RecordingMatch{Marker: e.Marker, SessionID: id, ClientLast: e.Last, RecordedLast: recordedLines(outputs[id])}
		if m.RecordedLast < m.ClientLast {
			t.Errorf("recording %s holds %s in order; its client received %s: the user saw output the recording does not hold",
				id, upTo(m.RecordedLast), upTo(m.ClientLast))
		}
		matches = append(matches, m)
	}
	return matches
}

func upTo(n int) string {
	if n == 0 {
		return "no line"
	}
	return fmt.Sprintf("line-1 to line-%d", n)
}

// recordedLines is the number of lines line-1, line-2, … that follow the
// marker in out without a gap.
func recordedLines(out string) int {
	lines := strings.Split(out, "\n")
	n := 0
	for _, l := range lines[1:] {
		if strings.TrimSuffix(l, "\r") != "line-"+strconv.Itoa(n+1) {
			break
		}
		n++
	}
	return n
}

// Output reads an asciicast v3 recording with gateway/recording's reader
// and returns its output events joined. A recording cut by a crash may end
// in the middle of its last line: the events before it are returned with
// the error.
func Output(cast []byte) (string, error) {
	rd, err := recording.NewReader(bytes.NewReader(cast))
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return b.String(), nil
		}
		if err != nil {
			return b.String(), err
		}
		if ev.Code == "o" {
			b.WriteString(ev.Data)
		}
	}
}

// SessionEnds groups the session.end events by session and lists the
// session.start events without one. Events of other types are ignored.
func SessionEnds(events []audit.Event) (ends map[string][]audit.Event, open []audit.Event) {
	ends = map[string][]audit.Event{}
	for _, ev := range events {
		if ev.Type == audit.TypeSessionEnd && ev.Session != nil {
			ends[ev.SessionID] = append(ends[ev.SessionID], ev)
		}
	}
	for _, ev := range events {
		if ev.Type == audit.TypeSessionStart && len(ends[ev.SessionID]) == 0 {
			open = append(open, ev)
		}
	}
	return ends, open
}

// CheckOneEnd fails t for a session.start without a session.end, or a
// session with more than one, and returns each session's end.
func CheckOneEnd(t testing.TB, events []audit.Event) map[string]audit.Event {
	t.Helper()
	ends, open := SessionEnds(events)
	for _, ev := range open {
		t.Errorf("%s session %s (started %s) has no session.end", ev.Session.Login, ev.SessionID, ev.Time.Format(time.StampMilli))
	}
	one := map[string]audit.Event{}
	for id, evs := range ends {
		if len(evs) > 1 {
			var rs []string
			for _, ev := range evs {
				rs = append(rs, fmt.Sprintf("%s by the %s (%s)", ev.Session.EndReason, ev.Session.EndHop, ev.Session.EndDetail))
			}
			t.Errorf("%s session %s has %d session.end events: %s", evs[0].Session.Login, id, len(evs), strings.Join(rs, "; "))
		}
		one[id] = evs[0]
	}
	return one
}
