package auditexport

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
)

func TestRetention(t *testing.T) {
	store, dir := openStore(t)
	ctx := context.Background()
	now := t0.Add(48 * time.Hour)
	emitN(t, store, 0, 25, t0)                  // old
	emitN(t, store, 25, 5, now.Add(-time.Hour)) // recent
	x, err := New(store, NewFile(t.TempDir()+"/out.jsonl"), Options{DataDir: dir, BatchSize: 10, Logger: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.step(ctx); err != nil { // delivers 1–10
		t.Fatal(err)
	}
	r := &Retention{Store: store, Audit: store, Keep: 24 * time.Hour, Exports: []*Exporter{x}, Batch: 4,
		Now: func() time.Time { return now }}
	res, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted != 10 || !res.HeldBack || res.Through != 10 {
		t.Fatalf("run %+v: want 10 deleted, the undelivered 15 old ones held back", res)
	}
	sp, _ := store.Span(ctx)
	if sp.First != 11 {
		t.Fatalf("first kept %d, want 11: retention deleted past the export's cursor", sp.First)
	}
	runs, err := store.Search(ctx, audit.Query{Type: audit.TypeAuditRetention})
	if err != nil || len(runs) != 1 {
		t.Fatalf("retention events %+v, %v; want one", runs, err)
	}
	f := runs[0].Fields
	if f["deleted"] != "10" || f["held_back"] != "true" || f["through_seq"] != "10" {
		t.Fatalf("retention event fields %v", f)
	}
	for n, err := x.step(ctx); n > 0; n, err = x.step(ctx) {
		if err != nil {
			t.Fatal(err)
		}
	}
	res, err = r.RunOnce(ctx)
	if err != nil || res.Deleted != 15 || res.HeldBack || !res.Oldest.Equal(now.Add(-time.Hour).Add(25*time.Millisecond)) {
		t.Fatalf("second run %+v, %v: want the 15 old ones deleted once delivered", res, err)
	}
	// No export: nothing bounds it; a run with nothing to do stores nothing.
	r.Exports = nil
	res, err = r.RunOnce(ctx)
	if err != nil || res.Deleted != 0 || res.Through != math.MaxInt64 {
		t.Fatalf("idle run %+v, %v", res, err)
	}
	if runs, _ := store.Search(ctx, audit.Query{Type: audit.TypeAuditRetention}); len(runs) != 2 {
		t.Fatalf("%d retention events, want 2 (the idle run stores none)", len(runs))
	}
}
