package proxy_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/adminapi"
	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/proxy"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/store"
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
// user, and lifted there, each within fanOut: the store announces each
// change (LISTEN/NOTIFY) and B re-reads at once. Three rounds, so that the
// 1 s polling under the feed cannot pass alone (it lands within fanOut in
// under a third of the cases). The figures are logged.
func TestLockReachesTheOtherProxy(t *testing.T) {
	const fanOut = 300 * time.Millisecond
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
	until := func(what string, want bool) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			if _, ok := b.proxy.LockSet.Locked(alice, time.Now()); ok == want {
				return time.Since(start)
			}
			if time.Since(start) > 3*adminapi.LockSyncInterval {
				t.Fatalf("%s: not seen at proxy B after %s", what, time.Since(start))
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	for round := range 3 {
		lock := locks.Lock{Target: locks.TargetOf(alice), Reason: fmt.Sprintf("incident %d", round), CreatedBy: "user:root", CreatedAt: time.Now()}
		if err := a.proxy.Locks.Add(ctx, lock); err != nil {
			t.Fatal(err)
		}
		set := until("the lock", true)
		if code, body, err := b.get(ctx, "honest", ""); err != nil || code != http.StatusForbidden || !strings.Contains(body, lock.Reason) {
			t.Fatalf("locked user at proxy B: %d %q %v, want 403 naming the lock", code, body, err)
		}
		if _, err := a.proxy.Locks.Remove(ctx, lock.Target, time.Now()); err != nil {
			t.Fatal(err)
		}
		lifted := until("the unlock", false)
		t.Logf("round %d: lock in force at the other proxy after %s, lifted after %s", round, set.Round(time.Millisecond), lifted.Round(time.Millisecond))
		if set > fanOut || lifted > fanOut {
			t.Fatalf("round %d: %s and %s, want both within %s", round, set, lifted, fanOut)
		}
	}
}

// text is everything logged so far.
func (s *syncBuffer) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestProxiesFindEachOtherInPostgres: proxies on one database beat in it
// and read each other back, so each can tell its workers where the others
// are (peers.go); a proxy that stops beating drops out of the live list.
func TestProxiesFindEachOtherInPostgres(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.Database(t)
	ctx := context.Background()
	dir, err := postgres.Open(ctx, postgres.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dir.Close() })
	onDB := func(addr string) func(*proxy.Config) {
		return func(c *proxy.Config) {
			b, err := postgres.Open(ctx, postgres.Config{URL: url})
			if err != nil {
				t.Fatal(err)
			}
			c.Store, c.PeerAddress = b, addr
			c.PeerHeartbeat, c.PeerTTL = 100*time.Millisecond, time.Second
		}
	}
	honest := map[string]func(*hostileStream){"honest": func(s *hostileStream) { s.reply(s.honest()) }}
	startHostile(t, honest, onDB("10.0.0.1:8443"))
	startHostile(t, honest, onDB("10.0.0.2:8443"))
	deadline := time.Now().Add(10 * time.Second)
	for {
		live, err := dir.Live(ctx, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var addrs []string
		for _, p := range live {
			addrs = append(addrs, p.Addr)
		}
		if strings.Join(addrs, ",") == "10.0.0.1:8443,10.0.0.2:8443" || strings.Join(addrs, ",") == "10.0.0.2:8443,10.0.0.1:8443" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("live proxies in the database: %v, want both", addrs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := dir.Heartbeat(ctx, store.PeerRecord{ID: "gone", Addr: "10.0.0.9:8443"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	live, err := dir.Live(ctx, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range live {
		if p.ID == "gone" {
			t.Fatalf("a proxy that stopped beating 300ms ago is live with a 200ms TTL: %v", live)
		}
	}
}

// TestKillReachesTheOtherProxy: two proxies on one PostgreSQL. A session
// relayed by proxy B is listed by proxy A's admin API, and killed through
// A: B ends it (reason killed) within killFanOut, A's answer already shows
// it ended, and A audits the kill naming B. A second kill finds nothing.
func TestKillReachesTheOtherProxy(t *testing.T) {
	const killFanOut = time.Second
	srv := pgtest.Start(t)
	url := srv.Database(t)
	ctx := context.Background()
	onDB := func() proxy.Config {
		b, err := postgres.Open(ctx, postgres.Config{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		return proxy.Config{Store: b, PeerHeartbeat: 100 * time.Millisecond, PeerTTL: 2 * time.Second}
	}
	a, b := startProxy(t, onDB()), startProxy(t, onDB())
	id := strings.Repeat("ef", 16)
	live, err := b.Sessions.Register(ctx, sessions.Session{ID: id, Principal: alice, Cluster: testCluster, Kind: sessions.KindExec, Target: "default/web/sh"})
	if err != nil {
		t.Fatal(err)
	}
	root := identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "root",
		Traits: map[string][]string{"groups": {"admins"}}, LoginID: "login-root"}
	admin := a.clients(t, root, time.Hour).admin
	waitUntil(t, "proxy A to list proxy B's session", func() bool {
		list, err := admin.Sessions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range list {
			if i.ID == id && i.Live() && i.Proxy != "" {
				return true
			}
		}
		return false
	})
	start := time.Now()
	info, err := admin.Kill(ctx, id)
	if err != nil {
		t.Fatalf("kill through proxy A: %v", err)
	}
	select {
	case <-live.Done():
	case <-time.After(killFanOut):
		t.Fatalf("proxy B still relays the session %s after the kill through proxy A", killFanOut)
	}
	took := time.Since(start)
	if e := live.Ended(); e == nil || e.Reason != sessions.ReasonKilled {
		t.Fatalf("ended %+v, want reason killed", e)
	}
	if info.Live() || info.Reason != sessions.ReasonKilled || info.Proxy == "" {
		t.Fatalf("proxy A answers %+v, want the session ended, killed, at the other proxy", info)
	}
	t.Logf("kill through proxy A ended the session at proxy B in %s", took)
	if _, err := admin.Kill(ctx, id); statusOf(err) != http.StatusNotFound {
		t.Fatalf("second kill: %v, want 404", err)
	}
	if err := a.Audit.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	evs, err := a.Audit.Search(ctx, audit.Query{Type: audit.TypeSessionKill})
	if err != nil || len(evs) != 1 || evs[0].SessionID != id || evs[0].Fields["proxy"] == "" || evs[0].Principal.Name != "root" {
		t.Fatalf("session.kill events %+v %v, want one by root naming proxy B", evs, err)
	}
}

// TestStaleLockViewFailsClosed: a proxy whose database stops answering
// cannot confirm its locks. Past --lock-stale-after, in strict mode, it
// ends its open streams (reason lock_view_stale), refuses requests with
// 503 and a message naming the key, and reports not ready; in best-effort
// mode the stream lives on and readiness does not fail on the locks. Once
// the database is back, the strict proxy serves again by itself.
func TestStaleLockViewFailsClosed(t *testing.T) {
	const staleAfter = 2 * time.Second
	srv := pgtest.Start(t)
	ctx := context.Background()
	honest := map[string]func(*hostileStream){"honest": func(s *hostileStream) { s.reply(s.honest()) }}
	onDB := func(mode locks.Mode) func(*proxy.Config) {
		url := srv.Database(t)
		return func(c *proxy.Config) {
			b, err := postgres.Open(ctx, postgres.Config{URL: url})
			if err != nil {
				t.Fatal(err)
			}
			c.Store, c.LockStaleAfter, c.LockMode = b, staleAfter, mode
		}
	}
	strict, lax := startHostile(t, honest, onDB(locks.ModeStrict)), startHostile(t, honest, onDB(locks.ModeBestEffort))
	open := func(e *hostileEnv, id string) *sessions.Live {
		l, err := e.proxy.Sessions.Register(ctx, sessions.Session{ID: id, Principal: alice, Cluster: testCluster, Kind: sessions.KindWatch})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	strictWatch, laxWatch := open(strict, strings.Repeat("a1", 16)), open(lax, strings.Repeat("b2", 16))

	srv.Stop()
	stopped := time.Now()
	select {
	case <-strictWatch.Done():
	case <-time.After(staleAfter + 5*adminapi.LockSyncInterval):
		t.Fatalf("the strict proxy's stream is still open %s after the database stopped", time.Since(stopped))
	}
	t.Logf("strict: the stream ended %s after the database stopped (lock-stale-after %s)", time.Since(stopped).Round(time.Millisecond), staleAfter)
	if e := strictWatch.Ended(); e.Reason != sessions.ReasonLockViewStale {
		t.Fatalf("stream ended %+v, want reason lock_view_stale", e)
	}
	code, body, err := strict.get(ctx, "honest", "")
	if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "lock-stale-after") || strings.Contains(body, "forged") {
		t.Fatalf("strict, stale: %d %q %v, want 503 naming lock-stale-after", code, body, err)
	}
	if failed := strings.Join(strict.proxy.Ready(ctx), "\n"); !strings.Contains(failed, "locks: ") {
		t.Fatalf("strict, stale: readiness failures %q, want the locks named", failed)
	}
	if e := laxWatch.Ended(); e != nil {
		t.Fatalf("best-effort: the stream ended: %+v", e)
	}
	if failed := strings.Join(lax.proxy.Ready(ctx), "\n"); strings.Contains(failed, "locks: ") {
		t.Fatalf("best-effort: readiness fails on the locks: %q", failed)
	}
	laxWatch.End(sessions.ReasonClientClosed)

	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the strict proxy to serve again", func() bool {
		code, _, err := strict.get(ctx, "honest", "")
		return err == nil && code == http.StatusOK
	})
}
