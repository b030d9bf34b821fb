package sessions

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/store/postgres"
	pgtest "github.com/limenhq/limen/test/postgres"
)

// TestDirectoryAcrossProxies: two proxies' registries on one PostgreSQL.
// A session registered at proxy A is listed, live, by proxy B with A's
// name, and ended once it ends at A; neither proxy lists its own sessions
// from the directory (its registry has them).
func TestDirectoryAcrossProxies(t *testing.T) {
	srv := pgtest.Start(t)
	b, err := postgres.Open(context.Background(), postgres.Config{URL: srv.Database(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	db, err := b.Sessions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	dirA, dirB := NewDirectory(db, "proxy-a", nil), NewDirectory(db, "proxy-b", nil)
	defer dirB.Close()
	regA := New(Config{OnStart: dirA.Record})
	regA.OnEnded(dirA.Record)
	id := strings.Repeat("ab", 16)
	l, err := regA.Register(context.Background(), sess(id, "alice"))
	if err != nil {
		t.Fatal(err)
	}
	seen := func(live bool) Info {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			others, err := dirB.Others(context.Background(), 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(others) == 1 && others[0].ID == id && others[0].Live() == live {
				return others[0]
			}
			if time.Now().After(deadline) {
				t.Fatalf("proxy B lists %+v, want session %s live=%v", others, id, live)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if i := seen(true); i.Proxy != "proxy-a" || i.Principal.Name != "alice" || i.Kind != KindExec {
		t.Fatalf("proxy B sees %+v", i)
	}
	if own, err := dirA.Others(context.Background(), 10); err != nil || len(own) != 0 {
		t.Fatalf("proxy A lists its own session from the directory: %+v %v", own, err)
	}
	l.End(ReasonKilled)
	if i := seen(false); i.Reason != ReasonKilled {
		t.Fatalf("ended session as proxy B sees it: %+v", i)
	}
	if i, ok, err := dirB.Other(context.Background(), id); err != nil || !ok || i.Proxy != "proxy-a" {
		t.Fatalf("Other: %+v %v %v", i, ok, err)
	}
	regA.Close()
	dirA.Close()
}
