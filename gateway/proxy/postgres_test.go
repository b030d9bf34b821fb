package proxy_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/adminapi"
	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/proxy"
	"github.com/limenhq/limen/gateway/store/postgres"
	pgtest "github.com/limenhq/limen/test/postgres"
)

// TestProxyOnPostgresFailsClosed: a proxy whose store is a real PostgreSQL
// (the enrollment token, the audit trail) serves requests; with the
// database stopped, a request is answered 503 and the worker's response is
// never relayed; once the database is back, requests succeed again without
// a restart, and every request a client saw succeed is in the audit trail,
// once.
func TestProxyOnPostgresFailsClosed(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.Database(t)
	ctx := context.Background()
	e := startHostile(t, map[string]func(*hostileStream){
		"honest": func(s *hostileStream) { s.reply(s.honest()) },
	}, func(c *proxy.Config) {
		b, err := postgres.Open(ctx, postgres.Config{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		c.Store = b
	})
	succeeded := 0
	get := func() (int, string) {
		t.Helper()
		code, body, err := e.get(ctx, "honest", "")
		if err != nil {
			t.Fatal(err)
		}
		if code == http.StatusOK {
			succeeded++
		}
		return code, body
	}
	if code, body := get(); code != http.StatusOK || body != "forged!\n" {
		t.Fatalf("with the database up: %d %q", code, body)
	}

	srv.Stop()
	for range 3 {
		code, body := get()
		if code != http.StatusServiceUnavailable || strings.Contains(body, "forged") {
			t.Fatalf("with the database down: %d %q, want 503 and nothing of the worker's response", code, body)
		}
		t.Logf("database down: %d %s", code, strings.TrimSpace(body))
	}

	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body := get()
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("database back for 20s, still %d %q", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Each request a client saw succeed is in the trail exactly once: as
	// its outcome (kube.request), or as its record (kube.sent, durable
	// before the response was relayed) flagged outcome unknown when the
	// database went away before the outcome, appended after, was stored.
	seen := map[string]int{}
	for _, ev := range e.reported(t) {
		if ev.Type == audit.TypeKubeRequest || ev.Type == audit.TypeKubeSent && ev.OutcomeUnknown {
			seen[ev.SessionID]++
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("session %s is in the audit trail %d times", id, n)
		}
	}
	if len(seen) < succeeded {
		t.Fatalf("%d requests in the audit trail for %d that succeeded; proxy log:\n%s", len(seen), succeeded, e.log.text())
	}
}

// TestLockReachesTheOtherProxy: two proxies on one PostgreSQL; a lock
// stored through proxy A is in force at proxy B, which refuses the locked
// user, within its lock sync interval (adminapi.LockSyncInterval, 1 s),
// and lifted there as soon after it is removed. The figure is logged.
func TestLockReachesTheOtherProxy(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.Database(t)
	ctx := context.Background()
	onDB := func(c *proxy.Config) {
		b, err := postgres.Open(ctx, postgres.Config{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		c.Store = b
	}
	honest := map[string]func(*hostileStream){"honest": func(s *hostileStream) { s.reply(s.honest()) }}
	a := startHostile(t, honest, onDB)
	b := startHostile(t, honest, onDB)
	if code, body, err := b.get(ctx, "honest", ""); err != nil || code != http.StatusOK {
		t.Fatalf("before the lock: %d %q %v", code, body, err)
	}
	lock := locks.Lock{Target: locks.TargetOf(alice), Reason: "incident 7", CreatedBy: "user:root", CreatedAt: time.Now()}
	set := time.Now()
	if err := a.proxy.Locks.Add(ctx, lock); err != nil {
		t.Fatal(err)
	}
	a.proxy.LockSet.Apply(locks.Change{Op: locks.OpSet, Lock: lock})
	for {
		if _, ok := b.proxy.LockSet.Locked(alice, time.Now()); ok {
			break
		}
		if time.Since(set) > 3*adminapi.LockSyncInterval {
			t.Fatalf("the lock is not in force at proxy B %s after proxy A stored it", time.Since(set))
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("lock in force at the other proxy after %s", time.Since(set).Round(time.Millisecond))
	if code, body, err := b.get(ctx, "honest", ""); err != nil || code != http.StatusForbidden || !strings.Contains(body, "incident 7") {
		t.Fatalf("locked user at proxy B: %d %q %v, want 403 naming the lock", code, body, err)
	}
	lifted := time.Now()
	if _, err := a.proxy.Locks.Remove(ctx, lock.Target, time.Now()); err != nil {
		t.Fatal(err)
	}
	for {
		if _, ok := b.proxy.LockSet.Locked(alice, time.Now()); !ok {
			break
		}
		if time.Since(lifted) > 3*adminapi.LockSyncInterval {
			t.Fatalf("the lock is still in force at proxy B %s after its removal", time.Since(lifted))
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("lock lifted at the other proxy after %s", time.Since(lifted).Round(time.Millisecond))
}

// text is everything logged so far.
func (s *syncBuffer) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
