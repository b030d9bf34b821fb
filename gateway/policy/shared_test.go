package policy

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/limenhq/limen/gateway/store/postgres"
	pgtest "github.com/limenhq/limen/test/postgres"
)

// TestSharedFloorAcrossProxies: two proxies' engines on one PostgreSQL.
// A activates revision 2 from its bundle host; B, whose host (a stale
// mirror) still serves revision 1 and who never saw 2, refuses it as a
// rollback, which alone it would have activated; the refusal is in the
// shared history A reads. With the database down, B activates nothing new
// and keeps its bundle; once it is back, a newer bundle activates.
func TestSharedFloorAcrossProxies(t *testing.T) {
	srv := pgtest.Start(t)
	b, err := postgres.Open(context.Background(), postgres.Config{URL: srv.Database(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	shared, err := b.Policy(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	priv, pub := testKeys(t)
	engine := func(host *bundleServer, id string) *Engine {
		e, err := New(context.Background(), Options{BundleURL: host.URL, BundleCAPEM: host.caPEM(), PublicKeyPEM: pub,
			Logger: quietLogger(), Shared: shared, ProxyID: id})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	}
	hostA, hostB := newBundleServer(t), newBundleServer(t)
	a, bb := engine(hostA, "proxy-a"), engine(hostB, "proxy-b")
	hostB.serve(buildBundle(t, "1", defaultRego(t), bobData("limen:view"), priv), `"1"`)
	if err := bb.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	hostA.serve(buildBundle(t, "2", defaultRego(t), bobData("limen:edit"), priv), `"2"`)
	if err := a.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	// B's host now serves an older build of the policy than the deployment
	// runs (same revision 1 would be "same"; serve 1 again under a new ETag
	// after B restarted, as a fresh engine).
	b2 := engine(hostB, "proxy-b")
	r := refreshRefused(t, b2, ReasonRollback, "1")
	if !strings.Contains(r.Error, "older than revision 2") {
		t.Fatalf("refusal %q: want it to name the shared floor", r.Error)
	}
	hist, err := a.SharedRefusals(context.Background(), 10)
	if err != nil || len(hist) != 1 || hist[0].Proxy != "proxy-b" || hist[0].Revision != "1" || hist[0].Reason != ReasonRollback {
		t.Fatalf("shared refusals seen by A: %+v %v", hist, err)
	}

	srv.Stop()
	hostB.serve(buildBundle(t, "3", defaultRego(t), bobData("limen:view"), priv), `"3"`)
	err = bb.Refresh(context.Background())
	if err == nil || !errors.Is(err, ErrUnavailable) || bb.Status().Revision != "1" {
		t.Fatalf("with the shared floor unreadable: %v, active %s; want nothing activated", err, bb.Status().Revision)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if err := bb.Refresh(context.Background()); err != nil || bb.Status().Revision != "3" {
		t.Fatalf("with the database back: %v, active %s", err, bb.Status().Revision)
	}
	if f, ok, err := shared.Floor(context.Background()); err != nil || !ok || f.Revision != "3" {
		t.Fatalf("shared floor %+v %v %v, want 3", f, ok, err)
	}
}
