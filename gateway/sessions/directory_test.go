package sessions

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/store"
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

// TestDirectoryProxyLost: a live session of a proxy that stopped beating is
// listed ended (proxy_lost), and cannot be killed; one of a live proxy can
// be asked to end, and the relaying proxy reads the request back.
func TestDirectoryProxyLost(t *testing.T) {
	db := store.NewMemorySessions()
	dirA, dirB := NewDirectory(db, "proxy-a", nil), NewDirectory(db, "proxy-b", nil)
	defer dirA.Close()
	defer dirB.Close()
	alive := map[string]bool{"proxy-a": true, "proxy-b": true}
	live := func(context.Context) (map[string]bool, error) { return alive, nil }
	dirA.SetLive(live)
	dirB.SetLive(live)
	regA := New(Config{OnStart: dirA.Record})
	defer regA.Close()
	id := strings.Repeat("cd", 16)
	if _, err := regA.Register(context.Background(), sess(id, "alice")); err != nil {
		t.Fatal(err)
	}
	waitListed(t, dirB, id)
	info, err := dirB.RequestKill(context.Background(), id, "user:admin")
	if err != nil || info.Proxy != "proxy-a" {
		t.Fatalf("kill request: %+v %v", info, err)
	}
	if by, err := dirA.KillRequest(context.Background(), id); err != nil || by != "user:admin" {
		t.Fatalf("proxy A reads the request back: %q %v", by, err)
	}
	if by, _ := dirB.KillRequest(context.Background(), id); by != "" {
		t.Fatalf("proxy B, which does not relay it, reads a request: %q", by)
	}
	delete(alive, "proxy-a")
	others, err := dirB.Others(context.Background(), 10)
	if err != nil || len(others) != 1 || others[0].Live() || others[0].Reason != ReasonProxyLost {
		t.Fatalf("session of a dead proxy: %+v %v, want it ended, proxy_lost", others, err)
	}
	if _, err := dirB.RequestKill(context.Background(), id, "user:admin"); !errors.Is(err, ErrNoLiveSession) {
		t.Fatalf("kill of a dead proxy's session: %v, want ErrNoLiveSession", err)
	}
}

// waitListed waits for dir to list session id (records are written behind).
func waitListed(t *testing.T, dir *Directory, id string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		others, err := dir.Others(context.Background(), 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(others) == 1 && others[0].ID == id {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s not listed: %+v", id, others)
		}
	}
}
