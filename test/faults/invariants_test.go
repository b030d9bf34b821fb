package faults

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/recstore"
)

// verdict is what the invariants found after a scenario: the figures of
// the report's "lost" column, and the breaches, each a sentence.
type verdict struct {
	served, refused   int    // GETs
	noOutcome         int    // GETs served whose outcome is not stored (flagged outcome unknown)
	watchEnds         string // how the watch runs ended
	execs, execLines  int    // exec runs that printed, lines the users saw
	recordings        int    // of those, recordings checked whole
	breaches          []string
	recordingsPending []string // sessions whose recording never arrived
}

func (v *verdict) breach(format string, args ...any) {
	v.breaches = append(v.breaches, fmt.Sprintf(format, args...))
}

// lost is the figure of what was lost: "none", or the breaches' count.
func (v verdict) lost() string {
	if len(v.breaches) == 0 {
		if v.noOutcome > 0 {
			return fmt.Sprintf("nothing lost; %d served GETs recorded with their outcome unknown (the trail failed after their record)", v.noOutcome)
		}
		return "nothing lost"
	}
	return fmt.Sprintf("%d breaches", len(v.breaches))
}

// invariantsOpts says where the scenario's gateway keeps its audit trail
// and recordings.
type invariantsOpts struct {
	user           string
	proxyDir       string // the proxy's data directory (audit.db, recordings)
	recordingStore string // "" is recstore.Path(proxyDir)
	// recordingWait bounds the wait for each recording's upload.
	recordingWait time.Duration
}

// checkInvariants stops the load and checks what its clients saw against
// the audit trail and the recordings; every breach fails the test.
func checkInvariants(t *testing.T, l *load, o invariantsOpts) verdict {
	t.Helper()
	l.stop()
	gets, watches, execs := l.snapshot()
	var v verdict
	v.watchEnds = watchEnds(watches)
	events := auditEvents(t, o.proxyDir, o.user)

	// Every GET its client saw served is in the trail exactly once: its
	// record (kube.sent, durable before the response was relayed) or, as
	// Search folds the two, its outcome. Its
	// outcome (kube.request, the API server's 404: probe-N does not exist)
	// follows without being waited for, so a trail that fails between the
	// two leaves the record flagged outcome unknown, as designed (the
	// AUDIT docs' --outcome-unknown); those are counted. Another attempt of
	// the same GET (client-go retries a 503 with Retry-After) is another
	// request, with a record of its own.
	count := func(evs []audit.Event) (records, outcomes map[string]int) {
		records, outcomes = map[string]int{}, map[string]int{}
		// A kube.sent names the request by its path; the probes' is
		// …/namespaces/NS/configmaps/probe-N.
		prefix := "/api/v1/namespaces/" + l.ns + "/configmaps/probe-"
		for _, ev := range evs {
			if ev.Kube == nil {
				continue
			}
			i := strings.Index(ev.Kube.Path, prefix)
			if i < 0 {
				continue
			}
			name := ev.Kube.Path[i+len(prefix)-len("probe-"):]
			// Search returns a kube.sent only when its outcome is not
			// stored (OutcomeUnknown): otherwise the kube.request stands
			// for both.
			switch {
			case ev.Type == audit.TypeKubeSent && ev.OutcomeUnknown:
				records[name]++
			case ev.Type == audit.TypeKubeRequest && ev.Kube.Status == 404:
				records[name]++
				outcomes[name]++
			}
		}
		return records, outcomes
	}
	rows, outcomes := count(events)
	for _, g := range gets {
		if g.served && outcomes[probeName(g.seq)] == 0 {
			// The outcome is appended after the response: the last ones
			// may land after the load's stop.
			time.Sleep(3 * time.Second)
			events = auditEvents(t, o.proxyDir, o.user)
			rows, outcomes = count(events)
			break
		}
	}
	for _, g := range gets {
		if !g.served {
			v.refused++
			continue
		}
		v.served++
		name := probeName(g.seq)
		if n := rows[name]; n != 1 {
			v.breach("GET %s was served to the client and is in the audit trail %d times, not once", name, n)
		}
		if outcomes[name] == 0 {
			v.noOutcome++
		}
	}

	// Every exec line a user saw is in a recording, of a session that
	// started and ended once.
	starts := map[string][]audit.Event{}
	for _, ev := range events {
		if ev.Type == audit.TypeSessionStart && ev.Session != nil && ev.Session.Login == "exec" && ev.Session.Namespace == l.ns {
			if c := ev.Session.Command; len(c) > 0 {
				starts[c[len(c)-1]] = append(starts[c[len(c)-1]], ev)
			}
		}
	}
	store := o.recordingStore
	if store == "" {
		store = recstore.Path(o.proxyDir)
	}
	wait := o.recordingWait
	if wait == 0 {
		wait = 60 * time.Second
	}
	for _, r := range execs {
		if len(r.lines) == 0 {
			continue
		}
		v.execs++
		v.execLines += len(r.lines)
		if r.exit == 0 && !r.end.IsZero() && len(r.lines) != execTicks {
			v.breach("exec %s exited 0 (success) after %d of its %d lines", r.id, len(r.lines), execTicks)
		}
		ss := starts[r.id]
		if len(ss) != 1 {
			v.breach("exec %s printed %d lines to its user with %d session.start in the audit trail, not one", r.id, len(r.lines), len(ss))
			continue
		}
		id := ss[0].SessionID
		cast, err := waitRecording(store, id, wait)
		if err != nil {
			v.recordingsPending = append(v.recordingsPending, id)
			v.breach("exec %s (session %s) printed %d lines, but its recording is not in the store after %s: %v", r.id, id, len(r.lines), wait, err)
			continue
		}
		out, err := castOutput(cast)
		if err != nil {
			v.breach("exec %s (session %s): recording unreadable: %v", r.id, id, err)
			continue
		}
		for _, line := range r.lines {
			if !strings.Contains(out, line+"\r\n") && !strings.Contains(out, line+"\n") {
				v.breach("exec %s (session %s): the user saw %q, which its recording lacks (it holds %d bytes of output)", r.id, id, line, len(out))
				break
			}
		}
		v.recordings++
	}
	// Read again, after the recordings' wait: the last session.end may
	// have been stored since.
	ends := map[string]int{}
	for _, ev := range auditEvents(t, o.proxyDir, o.user) {
		if ev.Type == audit.TypeSessionEnd {
			ends[ev.SessionID]++
		}
	}
	for runID, ss := range starts {
		for _, s := range ss {
			if n := ends[s.SessionID]; n != 1 {
				v.breach("exec %s (session %s) has %d session.end in the audit trail, not one", runID, s.SessionID, n)
			}
		}
	}
	for _, b := range v.breaches {
		t.Error(b)
	}
	return v
}

// auditEvents reads user's events from the proxy's audit trail.
func auditEvents(t *testing.T, proxyDir, user string) []audit.Event {
	t.Helper()
	return auditOf(t, proxyDir, audit.Query{User: user})
}

// auditOf searches the proxy's audit trail.
func auditOf(t *testing.T, proxyDir string, q audit.Query) []audit.Event {
	t.Helper()
	q.Limit = 1_000_000
	ctx := context.Background()
	st, err := audit.Open(ctx, audit.Path(proxyDir), audit.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("open the audit trail read-only: %v", err)
	}
	defer st.Close()
	evs, err := st.Search(ctx, q)
	if err != nil {
		t.Fatalf("search the audit trail: %v", err)
	}
	return evs
}

// waitRecording waits until the store in dir holds session id's recording
// (uploads are asynchronous) and returns it, its SHA-256 verified.
func waitRecording(dir, id string, within time.Duration) ([]byte, error) {
	deadline := time.Now().Add(within)
	for {
		b, err := readRecording(dir, id)
		if err == nil || time.Now().After(deadline) {
			return b, err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func readRecording(dir, id string) ([]byte, error) {
	st, err := recstore.OpenExisting(dir)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	r, _, err := st.Open(id)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// castOutput is the output a recording holds, its "o" events joined.
func castOutput(b []byte) (string, error) {
	rd, err := recording.NewReader(strings.NewReader(string(b)))
	if err != nil {
		return "", err
	}
	var out strings.Builder
	for {
		ev, err := rd.Next()
		if err == io.EOF {
			return out.String(), nil
		}
		if err != nil {
			return out.String(), err
		}
		if ev.Code == "o" {
			out.WriteString(ev.Data)
		}
	}
}

// watchEnds sums up how the watch runs ended: "N runs" and the distinct
// reasons the ones before the last ended for.
func watchEnds(ws []watchRun) string {
	count := map[string]int{}
	var order []string
	events := 0
	for _, w := range ws {
		events += w.events
		if w.err == "" {
			continue
		}
		r := clip(timestamps.ReplaceAllString(w.err, "…"), 120)
		if count[r] == 0 {
			order = append(order, r)
		}
		count[r]++
	}
	s := fmt.Sprintf("%d runs, %d events", len(ws), events)
	for _, r := range order {
		s += fmt.Sprintf(", %d× ended: %s", count[r], r)
	}
	return s
}
