package audit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// sentEvent is the proxy's record of the request kubeEvent describes, for
// session id.
func sentEvent(id, method, verb, sub string, at time.Time) Event {
	e := kubeEvent("alice", "prod", verb, at)
	e.Type, e.SessionID = TypeKubeSent, id
	e.Kube.Method, e.Kube.Subresource, e.Kube.Status, e.Kube.Latency = method, sub, 0, 0
	return e
}

func outcomeOf(sent Event) Event {
	e := sent
	k := *sent.Kube
	k.Status, k.Latency = 200, time.Millisecond
	e.Type, e.Time, e.Kube = TypeKubeRequest, sent.Time.Add(time.Millisecond), &k
	return e
}

func sessionID(i int) string { return fmt.Sprintf("%032x", i+1) }

// TestOutcomeUnknown: a request's record (kube.sent) with its outcome is
// left out of a search, which shows the outcome; one without is shown,
// flagged OutcomeUnknown, and PossiblyApplied when it may have changed
// something. The worker's refusal is an outcome too.
func TestOutcomeUnknown(t *testing.T) {
	s, _ := openTemp(t, Options{})
	ctx := context.Background()
	sent := []Event{
		sentEvent(sessionID(0), "GET", "list", "", t0),                               // answered
		sentEvent(sessionID(1), "GET", "get", "", t0.Add(time.Second)),               // lost: a read
		sentEvent(sessionID(2), "DELETE", "delete", "", t0.Add(2*time.Second)),       // lost: a write
		sentEvent(sessionID(3), "GET", "get", "exec", t0.Add(3*time.Second)),         // lost: an exec upgrade
		sentEvent(sessionID(4), "POST", "create", "", t0.Add(4*time.Second)),         // refused by the worker
		sentEvent(sessionID(5), "PATCH", "patch", "", t0.Add(5*time.Second)),         // answered
		sentEvent(sessionID(6), "OPTIONS", "options", "", t0.Add(6*time.Second)),     // lost: a read
		sentEvent(sessionID(7), "HEAD", "get", "portforward", t0.Add(7*time.Second)), // lost: a port-forward
	}
	for _, e := range sent {
		if err := s.Emit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	refusal := Event{Type: TypeAuthDenied, Time: t0.Add(4500 * time.Millisecond), Principal: sent[4].Principal, Cluster: "prod",
		SessionID: sessionID(4), Denied: &Denied{Hop: HopWorker, Action: ActionKube, Reason: "grant expired"}}
	// A session.start shares a session id with its request, but is no
	// outcome of it.
	start := Event{Type: TypeSessionStart, Time: t0.Add(3500 * time.Millisecond), Principal: sent[3].Principal, Cluster: "prod",
		SessionID: sessionID(3), Session: &Session{Kind: "kube", Login: "exec"}}
	for _, e := range []Event{outcomeOf(sent[0]), outcomeOf(sent[5]), refusal, start} {
		if err := s.Emit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	type row struct {
		typ              Type
		id               string
		unknown, applied bool
	}
	rows := func(evs []Event) []row {
		var out []row
		for _, e := range evs {
			out = append(out, row{e.Type, e.SessionID, e.OutcomeUnknown, e.PossiblyApplied})
		}
		return out
	}
	lost := func(i int, applied bool) row { return row{TypeKubeSent, sessionID(i), true, applied} }
	tests := []struct {
		name string
		q    Query
		want []row
	}{
		{"everything", Query{}, []row{
			lost(1, false), lost(2, true), lost(3, true), lost(6, false), lost(7, true),
			{TypeKubeRequest, sessionID(0), false, false}, {TypeSessionStart, sessionID(3), false, false},
			{TypeAuthDenied, sessionID(4), false, false}, {TypeKubeRequest, sessionID(5), false, false},
		}},
		{"outcome unknown", Query{OutcomeUnknown: true}, []row{lost(1, false), lost(2, true), lost(3, true), lost(6, false), lost(7, true)}},
		{"outcome unknown of a verb", Query{OutcomeUnknown: true, Verb: "delete"}, []row{lost(2, true)}},
		{"every record", Query{Type: TypeKubeSent}, []row{
			{TypeKubeSent, sessionID(0), false, false}, lost(1, false), lost(2, true), lost(3, true),
			{TypeKubeSent, sessionID(4), false, false}, {TypeKubeSent, sessionID(5), false, false}, lost(6, false), lost(7, true),
		}},
		{"outcomes", Query{Type: TypeKubeRequest}, []row{{TypeKubeRequest, sessionID(0), false, false}, {TypeKubeRequest, sessionID(5), false, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Search(ctx, tt.q)
			if err != nil {
				t.Fatal(err)
			}
			// Search orders by time; compare as sets of rows in the
			// order wanted, which lists the lost records first.
			g, w := rows(got), tt.want
			if len(g) != len(w) {
				t.Fatalf("got %v, want %v", g, w)
			}
			for _, r := range w {
				found := false
				for _, x := range g {
					found = found || x == r
				}
				if !found {
					t.Fatalf("got %v, want %v (missing %v)", g, w, r)
				}
			}
		})
	}
}

// TestOutcomeFlagsAreNotStored: the flags are Search's answers; an event
// submitted with them (a worker may send anything) is stored without.
func TestOutcomeFlagsAreNotStored(t *testing.T) {
	s, _ := openTemp(t, Options{})
	ctx := context.Background()
	e := kubeEvent("alice", "prod", "get", t0)
	e.OutcomeUnknown, e.PossiblyApplied = true, true
	if err := s.Emit(ctx, e); err != nil {
		t.Fatal(err)
	}
	got, err := s.Search(ctx, Query{})
	if err != nil || len(got) != 1 || got[0].OutcomeUnknown || got[0].PossiblyApplied {
		t.Fatalf("search = %+v (%v), want the kube.request without flags", got, err)
	}
}

// TestSubmitKeepsOrder: events submitted without waiting are committed in
// the order submitted, so a request's outcome never lands before its
// record, and Flush returns once all of them are durable.
func TestSubmitKeepsOrder(t *testing.T) {
	s, _ := openTemp(t, Options{MaxBatch: 3}) // several transactions
	ctx := context.Background()
	const n = 20
	var commits []Commit
	for i := range n {
		e := sentEvent(sessionID(i), "GET", "get", "", t0) // one time: the order is the id's
		commits = append(commits, s.Submit(e), s.Submit(outcomeOf(e)))
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for i, c := range commits {
		select {
		case err := <-c.done:
			if err != nil {
				t.Fatalf("event %d: %v", i, err)
			}
		default:
			t.Fatalf("event %d submitted before Flush was not answered when Flush returned", i)
		}
	}
	rows, err := sqlDB(s).QueryContext(ctx, "SELECT type, session_id FROM events ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var typ, id string
		if err := rows.Scan(&typ, &id); err != nil {
			t.Fatal(err)
		}
		got = append(got, typ+" "+id)
	}
	for i := range n {
		if want := []string{string(TypeKubeSent) + " " + sessionID(i), string(TypeKubeRequest) + " " + sessionID(i)}; len(got) < 2*i+2 ||
			got[2*i] != want[0] || got[2*i+1] != want[1] {
			t.Fatalf("stored in order %v, want each record before its outcome, in submission order", got)
		}
	}
}

// TestSubmitFailsClosed: Submit on a closed or read-only store, or of an
// invalid event, answers at once, with the error Emit would give.
func TestSubmitFailsClosed(t *testing.T) {
	ctx := context.Background()
	s, path := openTemp(t, Options{})
	bad := kubeEvent("alice", "prod", "get", t0)
	bad.Kube.Path = "/api?x=1"
	if err := s.Submit(bad).Wait(ctx); !errors.Is(err, ErrInvalid) {
		t.Fatalf("invalid event: %v, want ErrInvalid", err)
	}
	r, err := Open(ctx, path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Submit(kubeEvent("alice", "prod", "get", t0)).Wait(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("read-only: %v, want ErrUnavailable", err)
	}
	if err := r.Flush(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("read-only Flush: %v, want ErrUnavailable", err)
	}
	s.Close()
	if err := s.Submit(kubeEvent("alice", "prod", "get", t0)).Wait(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("closed: %v, want ErrUnavailable", err)
	}
}

// TestCloseCommitsQueuedEvents: events queued when the store closes, and
// not yet taken by the batcher, are committed before it stops, appended
// ones included; an event submitted after Close is refused. The batcher is
// held inside a commit by the database's write lock, taken by another
// connection (as an operator's sqlite3 shell would), so that events queue
// behind it.
func TestCloseCommitsQueuedEvents(t *testing.T) {
	s, path := openTemp(t, Options{Linger: time.Hour})
	ctx := context.Background()
	conn, err := sqlDB(s).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	queued := []Commit{s.Submit(kubeEvent("alice", "prod", "get", t0))} // the batcher waits on the lock with it
	for range 10 {
		queued = append(queued, s.Submit(kubeEvent("alice", "prod", "get", t0)))
	}
	s.Append(kubeEvent("appended", "prod", "get", t0))
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	for i, c := range queued {
		if err := c.Wait(ctx); err != nil {
			t.Fatalf("queued event %d: %v, want it committed at Close", i, err)
		}
	}
	if err := s.Submit(kubeEvent("late", "prod", "get", t0)).Wait(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("an event after Close: %v, want ErrUnavailable", err)
	}
	r, err := Open(ctx, path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got, err := r.Search(ctx, Query{User: "appended"}); err != nil || len(got) != 1 {
		t.Fatalf("the appended event after Close: %d stored (%v), want it committed", len(got), err)
	}
}

// TestAppendJoinsTheNextCommit: an appended event (a request's outcome)
// waits for the next event somebody waits for (the next request's record)
// and shares its commit; with nothing to join, it is committed once its
// linger ends.
func TestAppendJoinsTheNextCommit(t *testing.T) {
	ctx := context.Background()
	s, _ := openTemp(t, Options{Linger: time.Hour})
	first := sentEvent(sessionID(0), "GET", "get", "", t0)
	if err := s.Emit(ctx, first); err != nil {
		t.Fatal(err)
	}
	s.Append(outcomeOf(first))
	if err := s.Emit(ctx, sentEvent(sessionID(1), "GET", "get", "", t0)); err != nil {
		t.Fatal(err)
	}
	if c, e := s.commits.Load(), s.events.Load(); c != 2 || e != 3 {
		t.Fatalf("%d commits for %d events, want the outcome in the second record's commit: 2 for 3", c, e)
	}

	s, _ = openTemp(t, Options{Linger: time.Millisecond})
	s.Append(outcomeOf(first))
	for end := time.Now().Add(10 * time.Second); s.events.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("an appended event alone was not committed after its linger")
		}
	}
}

// TestRecordAndOutcomeShareCommits: requests as the proxy makes them — the
// record submitted, waited for, then the outcome appended — share transactions when they run concurrently: fewer commits than
// events.
func TestRecordAndOutcomeShareCommits(t *testing.T) {
	s, _ := openTemp(t, Options{})
	ctx := context.Background()
	const n = 100
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			sent := sentEvent(sessionID(i), "GET", "get", "", t0)
			if err := s.Submit(sent).Wait(ctx); err != nil {
				errs <- err
				return
			}
			s.Append(outcomeOf(sent))
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	commits, events := s.commits.Load(), s.events.Load()
	if events != 2*n {
		t.Fatalf("%d events committed, want %d", events, 2*n)
	}
	if commits >= events {
		t.Fatalf("%d commits for %d events: no group commit", commits, events)
	}
	t.Logf("%d events in %d commits", events, commits)
	unknown, err := s.Search(ctx, Query{OutcomeUnknown: true})
	if err != nil || len(unknown) != 0 {
		t.Fatalf("outcome unknown: %d (%v), want none", len(unknown), err)
	}
}
