package audit

import (
	"context"
	"math"
	"testing"
	"time"
)

func TestEventsAfterDeleteBefore(t *testing.T) {
	s, _ := openTemp(t, Options{})
	ctx := context.Background()
	if sp, err := s.Span(ctx); err != nil || sp != (Span{}) {
		t.Fatalf("empty store span %+v, %v", sp, err)
	}
	for i := range 10 {
		e := kubeEvent("alice", "prod", "get", t0.Add(time.Duration(i)*time.Minute))
		if i == 3 {
			e.Type = TypeKubeSent // Search hides these; the export must not
		}
		if err := s.Emit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.EventsAfter(ctx, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[0].ID != 3 || got[3].ID != 6 || got[1].Type != TypeKubeSent {
		t.Fatalf("EventsAfter(2, 4) = %+v", got)
	}
	if !got[0].Time.Equal(t0.Add(2 * time.Minute)) {
		t.Fatalf("event 3 time %s", got[0].Time)
	}
	if rest, _ := s.EventsAfter(ctx, 10, 5); len(rest) != 0 {
		t.Fatalf("events after the last: %+v", rest)
	}
	// Before t0+5m: events 1–5; through 4 keeps 5; batches of 3.
	n, err := s.DeleteBefore(ctx, t0.Add(5*time.Minute), 4, 3)
	if err != nil || n != 3 {
		t.Fatalf("first batch deleted %d, %v; want 3", n, err)
	}
	n, err = s.DeleteBefore(ctx, t0.Add(5*time.Minute), 4, 3)
	if err != nil || n != 1 {
		t.Fatalf("second batch deleted %d, %v; want 1 (event 5 is past the cursor)", n, err)
	}
	sp, err := s.Span(ctx)
	if err != nil || sp.First != 5 || sp.Last != 10 || !sp.Oldest.Equal(t0.Add(4*time.Minute)) {
		t.Fatalf("span %+v, %v", sp, err)
	}
	n, err = s.DeleteBefore(ctx, t0.Add(5*time.Minute), math.MaxInt64, 100)
	if err != nil || n != 1 {
		t.Fatalf("unbounded delete %d, %v; want 1", n, err)
	}
	// New events keep growing ids after deletions.
	if err := s.Emit(ctx, kubeEvent("bob", "prod", "get", t0)); err != nil {
		t.Fatal(err)
	}
	if sp, _ := s.Span(ctx); sp.Last != 11 {
		t.Fatalf("last id %d after a deletion, want 11", sp.Last)
	}
}
