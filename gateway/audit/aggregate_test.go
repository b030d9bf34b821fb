package audit

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/identity"
)

// recorder is a Sink that keeps what it is given.
type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) Emit(_ context.Context, e Event) error {
	if err := e.Validate(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	return nil
}

func (r *recorder) all() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

func refusal(addr, action string) Event {
	return Event{Type: TypeAuthDenied, Time: t0, ClientAddr: addr,
		Denied: &Denied{Hop: HopProxy, Action: action, Reason: "authentication: no client certificate", Path: "/k8s/prod/api"}}
}

// summary is one stored event as "addr action count".
func summary(e Event) string {
	return fmt.Sprintf("%s %s %d", e.ClientAddr, e.Denied.Action, max(e.Denied.Count, 1))
}

func TestAggregatorCountsUnauthenticatedRefusals(t *testing.T) {
	rec := &recorder{}
	var now atomic.Int64
	now.Store(t0.UnixNano())
	a := NewAggregator(rec, AggregatorOptions{Interval: time.Minute, MaxAddrs: 3,
		Now: func() time.Time { return time.Unix(0, now.Load()) }, Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()
	emit := func(e Event) {
		t.Helper()
		if err := a.Emit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	for range 1000 {
		emit(refusal("192.0.2.1:4000", ActionKube))
	}
	emit(refusal("192.0.2.1:4001", ActionLogin)) // same address, another action
	for range 10 {
		emit(refusal("192.0.2.2", ActionKube))
	}
	for i := range 50 { // past MaxAddrs windows: counted together
		emit(refusal(fmt.Sprintf("198.51.100.%d:1", i), ActionKube))
	}
	// Not aggregated: a refusal of a known principal, a worker's, any
	// other event.
	alice := identity.Principal{Kind: identity.KindUser, Name: "alice"}
	known := refusal("192.0.2.1", ActionAdmin)
	known.Principal = alice
	worker := refusal("192.0.2.1", ActionKube)
	worker.Denied.Hop = HopWorker
	for range 3 {
		emit(known)
		emit(worker)
	}
	emit(kubeEvent("alice", "prod", "get", t0))
	if err := a.Emit(ctx, refusal("192.0.2.1", "bogus")); err == nil {
		t.Fatal("an invalid refusal was counted")
	}

	firsts := []string{"192.0.2.1:4000 kube 1", "192.0.2.1:4001 login 1", "192.0.2.2 kube 1", OtherClients + " kube 1"}
	if got := rec.all(); len(got) != len(firsts)+7 {
		t.Fatalf("%d events stored before the interval ended, want %d", len(got), len(firsts)+7)
	}

	// The interval ends: one event per address and action with the count
	// of the rest.
	now.Add(int64(time.Minute))
	deadline := time.Now().Add(10 * time.Second)
	for len(rec.all()) < len(firsts)+7+3 {
		if time.Now().After(deadline) {
			t.Fatalf("no aggregated events within 10s: %d stored", len(rec.all()))
		}
		time.Sleep(5 * time.Millisecond)
	}
	a.Close()
	got := map[string]int{}
	total := 0
	for _, e := range rec.all() {
		if !Aggregated(e) {
			continue
		}
		got[summary(e)]++
		total += max(e.Denied.Count, 1)
	}
	want := map[string]int{
		"192.0.2.1:4000 kube 1": 1, "192.0.2.1:4000 kube 999": 1, "192.0.2.1:4001 login 1": 1,
		"192.0.2.2 kube 1": 1, "192.0.2.2 kube 9": 1, OtherClients + " kube 1": 1, OtherClients + " kube 49": 1,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("stored refusals (addr action count: times)\n got %v\nwant %v", got, want)
	}
	if total != 1000+1+10+50 {
		t.Fatalf("the stored refusals stand for %d, want %d: %v", total, 1061, got)
	}
}

// TestAggregatorCloseStoresCounts: refusals still being counted are stored
// at Close, and a new interval starts with a refusal stored at once.
func TestAggregatorCloseStoresCounts(t *testing.T) {
	s, _ := openTemp(t, Options{})
	a := NewAggregator(s, AggregatorOptions{Interval: time.Hour})
	ctx := context.Background()
	for range 500 {
		if err := a.Emit(ctx, refusal("203.0.113.9:1234", ActionEnroll)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Search(ctx, Query{Action: ActionEnroll})
	if err != nil || len(got) != 1 || got[0].Denied.Count != 0 {
		t.Fatalf("before Close: %+v, %v; want the first refusal alone", got, err)
	}
	a.Close()
	got, err = s.Search(ctx, Query{Action: ActionEnroll})
	if err != nil || len(got) != 2 || got[1].Denied.Count != 499 || got[1].ClientAddr != "203.0.113.9:1234" {
		t.Fatalf("after Close: %+v, %v; want one more with count 499", got, err)
	}
}
