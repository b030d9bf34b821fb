package tunnel

import (
	"context"
	"net"
	"testing"
)

// TestDrainHandsOver: a draining worker gets new streams only while it is
// the cluster's only usable worker, and its acknowledgement counts the
// others, so it knows when its replacement is there.
func TestDrainHandsOver(t *testing.T) {
	checkGoroutines(t)
	pki := newPKI(t)
	srv := &Server{Logger: testLogger(t), Timing: testTiming()}
	p := startProxy(t, pki, srv, "127.0.0.1:0")
	old := newWorker(t, pki, p.addr(), "c1", "old", echo)
	startWorker(t, old)
	eventually(t, "the old worker ready", func() bool { return srv.Connected("c1") })

	ctx := context.Background()
	ack, err := old.Drain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ack.Others != 0 {
		t.Fatalf("drain with no other worker: others = %d, want 0", ack.Others)
	}
	if ws := srv.Workers(); len(ws) != 1 || !ws[0].Draining {
		t.Fatalf("workers after drain: %+v, want the one worker draining", ws)
	}
	// Alone, the draining worker still serves.
	roundTrip(t, srv, "c1", "still served")

	startWorker(t, newWorker(t, pki, p.addr(), "c1", "new", echo))
	eventually(t, "the replacement ready", func() bool {
		ack, err := old.Drain(ctx)
		return err == nil && ack.Others == 1
	})
	var conns []net.Conn
	for range 6 {
		c, err := srv.Open(ctx, "c1")
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, w := range srv.Workers() {
		want := uint64(6)
		if w.WorkerID == "old" {
			want = 1 // the round trip before the replacement came
		}
		if w.Opened != want {
			t.Errorf("worker %s (draining %v) opened %d streams, want %d", w.WorkerID, w.Draining, w.Opened, want)
		}
	}
	for _, c := range conns {
		_ = c.Close()
	}
}
