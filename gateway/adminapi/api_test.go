package adminapi_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/adminapi"
	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/internal/apihttp"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/sessions"
)

type policy struct{}

func (policy) AdminAllow(_ context.Context, p identity.Principal, _ string) (bool, error) {
	return slices.Contains(p.Traits["groups"], "admins"), nil
}

// sink records events and fails while broken is set.
type sink struct {
	mu     sync.Mutex
	events []audit.Event
	broken bool
}

func (s *sink) Emit(_ context.Context, e audit.Event) error {
	if err := e.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken {
		return audit.ErrUnavailable
	}
	s.events = append(s.events, e)
	return nil
}

func (s *sink) setBroken(b bool) { s.mu.Lock(); s.broken = b; s.mu.Unlock() }

func (s *sink) last(typ audit.Type) (audit.Event, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.events) - 1; i >= 0; i-- {
		if s.events[i].Type == typ {
			return s.events[i], true
		}
	}
	return audit.Event{}, false
}

type env struct {
	proxy  string
	skew   atomic.Int64 // added to the handler's clock
	ca     *ca.Authority
	store  *locks.Store
	set    *locks.Set
	reg    *sessions.Registry
	audit  *sink
	killed chan sessions.Info
	h      *adminapi.Handler
	// pushed are the changes OnChange was given, as the workers get them.
	pushed chan locks.Change
}

func setup(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	quiet := slog.New(slog.DiscardHandler)
	authority, err := ca.Open(ca.Options{DataDir: dir, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	store, err := locks.Open(context.Background(), locks.Path(dir))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{ca: authority, store: store, set: locks.NewSet(), audit: &sink{}, killed: make(chan sessions.Info, 4), pushed: make(chan locks.Change, 16)}
	e.reg = sessions.New(sessions.Config{Locks: e.set, Logger: quiet})
	t.Cleanup(func() { e.reg.Close(); store.Close() })
	h, err := adminapi.New(adminapi.Config{
		LockStore: store, Locks: e.set, Sessions: e.reg, Admin: policy{}, Principal: authority.PrincipalFromRequest, Audit: e.audit,
		Now: func() time.Time { return time.Now().Add(time.Duration(e.skew.Load())) },
		OnChange: func(_ context.Context, c locks.Change) {
			e.set.Apply(c)
			select {
			case e.pushed <- c:
			default:
			}
		},
		OnKill: func(_ context.Context, i sessions.Info, _ identity.Principal) { e.killed <- i },
		Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.h = h
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h.Register(mux)
	srv := httptest.NewUnstartedServer(mux)
	srv.TLS = authority.ServerTLSConfig()
	srv.Config.ErrorLog = slog.NewLogLogger(slog.DiscardHandler, slog.LevelError)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	e.proxy = strings.TrimPrefix(srv.URL, "https://")
	return e
}

// client returns an API client presenting a CA-issued certificate for p, or
// none when p is nil.
func (e *env) client(t *testing.T, p *identity.Principal) *adminapi.Client {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(e.ca.RootCert())
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13}
	if p != nil {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		cert, err := e.ca.IssueUser(key.Public(), *p, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key}}
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
	return &adminapi.Client{Client: apihttp.Client{Proxy: e.proxy, HTTP: hc}}
}

var (
	admin = identity.Principal{Kind: identity.KindUser, Name: "root-admin", Traits: map[string][]string{"groups": {"admins"}}}
	alice = identity.Principal{Kind: identity.KindUser, Name: "alice", Traits: map[string][]string{"groups": {"dev"}}}
)

func status(err error) int {
	var se *apihttp.StatusError
	if errors.As(err, &se) {
		return se.Code
	}
	return 0
}

func TestLockEndsSessionsAndRefuses(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	live, err := e.reg.Register(ctx, sessions.Session{ID: "s1", Principal: alice, Cluster: "dev", Kind: sessions.KindWatch, Target: "/api/v1/pods"})
	if err != nil {
		t.Fatal(err)
	}
	c := e.client(t, &admin)
	start := time.Now()
	l, err := c.Lock(ctx, adminapi.LockRequest{Target: locks.TargetOf(alice), Reason: "incident 42", TTL: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-live.Done():
		t.Logf("API lock → session end: %s", time.Since(start))
	case <-time.After(2 * time.Second):
		t.Fatal("alice's session still live 2s after the lock")
	}
	if l.CreatedBy != "user:root-admin" || l.Expires.IsZero() {
		t.Fatalf("lock %+v", l)
	}
	ev, ok := e.audit.last(audit.TypeUserLock)
	if !ok || ev.Principal.Name != "root-admin" || ev.Fields["target"] != "user:alice" || ev.Fields["reason"] != "incident 42" {
		t.Fatalf("user.lock event %+v", ev)
	}
	_, err = e.reg.Register(ctx, sessions.Session{ID: "s2", Principal: alice, Cluster: "dev", Kind: sessions.KindExec})
	if err == nil || !strings.Contains(err.Error(), "user alice is locked by user:root-admin: incident 42 (until ") {
		t.Fatalf("new session of a locked user: %v", err)
	}
	list, err := c.Locks(ctx)
	if err != nil || len(list) != 1 || list[0].Target.Name != "alice" {
		t.Fatalf("Locks = %+v, %v", list, err)
	}

	// Unlock, and again.
	if _, err := c.Unlock(ctx, locks.TargetOf(alice)); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.audit.last(audit.TypeUserUnlock); !ok {
		t.Fatal("unlock not audited")
	}
	if _, ok := e.set.Locked(alice, time.Now()); ok {
		t.Fatal("alice still locked in the set after unlock")
	}
	if _, err := c.Unlock(ctx, locks.TargetOf(alice)); status(err) != http.StatusNotFound {
		t.Fatalf("second unlock: %v, want 404", err)
	}
}

func TestAuthorization(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	if _, err := e.client(t, nil).Locks(ctx); status(err) != http.StatusUnauthorized {
		t.Fatalf("no certificate: %v, want 401", err)
	}
	c := e.client(t, &alice)
	calls := map[string]func() error{
		"lock": func() error {
			_, err := c.Lock(ctx, adminapi.LockRequest{Target: locks.TargetOf(admin), Reason: "x"})
			return err
		},
		"unlock":   func() error { _, err := c.Unlock(ctx, locks.TargetOf(admin)); return err },
		"locks":    func() error { _, err := c.Locks(ctx); return err },
		"sessions": func() error { _, err := c.Sessions(ctx); return err },
		"kill":     func() error { _, err := c.Kill(ctx, "abc"); return err },
	}
	for name, call := range calls {
		if err := call(); status(err) != http.StatusForbidden {
			t.Errorf("%s by a non-admin: %v, want 403", name, err)
		}
	}
	if ev, ok := e.audit.last(audit.TypeAuthDenied); !ok || ev.Principal.Name != "alice" {
		t.Fatalf("refusal not audited: %+v", ev)
	}
	if _, ok := e.set.Locked(admin, time.Now()); ok {
		t.Fatal("a refused lock took effect")
	}
}

// TestLockedAdminCannotUnlockThemself: a locked admin is refused every
// admin call, their own unlock included (DESIGN.md §2); another admin can
// unlock them.
func TestLockedAdminCannotUnlockThemself(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	other := identity.Principal{Kind: identity.KindUser, Name: "other-admin", Traits: admin.Traits}
	c, oc := e.client(t, &admin), e.client(t, &other)
	if _, err := oc.Lock(ctx, adminapi.LockRequest{Target: locks.TargetOf(admin), Reason: "stolen laptop"}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Unlock(ctx, locks.TargetOf(admin))
	if status(err) != http.StatusForbidden || !strings.Contains(err.Error(), "user root-admin is locked by user:other-admin: stolen laptop") {
		t.Fatalf("locked admin unlocks themself: %v, want 403 naming the lock", err)
	}
	if _, ok := e.set.Locked(admin, time.Now()); !ok {
		t.Fatal("the locked admin's unlock took effect in the set")
	}
	if l, _ := e.store.List(ctx, time.Now()); len(l) != 1 {
		t.Fatalf("the locked admin's unlock took effect in the store: %+v", l)
	}
	for name, call := range map[string]func() error{
		"lock another": func() error {
			_, err := c.Lock(ctx, adminapi.LockRequest{Target: locks.TargetOf(other), Reason: "revenge"})
			return err
		},
		"list locks":    func() error { _, err := c.Locks(ctx); return err },
		"list sessions": func() error { _, err := c.Sessions(ctx); return err },
	} {
		if err := call(); status(err) != http.StatusForbidden {
			t.Errorf("%s while locked: %v, want 403", name, err)
		}
	}
	if _, ok := e.set.Locked(other, time.Now()); ok {
		t.Fatal("a locked admin locked someone")
	}
	ev, ok := e.audit.last(audit.TypeAuthDenied)
	if !ok || ev.Principal.Name != "root-admin" || ev.Denied.Hop != audit.HopProxy || ev.Denied.Action != audit.ActionAdmin || !strings.Contains(ev.Denied.Reason, "locked") {
		t.Fatalf("refusal of a locked admin not audited: %+v", ev)
	}
	if _, err := oc.Unlock(ctx, locks.TargetOf(admin)); err != nil {
		t.Fatalf("another admin unlocks: %v", err)
	}
	if _, err := c.Locks(ctx); err != nil {
		t.Fatalf("after the unlock: %v", err)
	}
}

// TestExpiredCertificateRefused: a certificate that expires while its
// connection stays open is refused like at /k8s/.
func TestExpiredCertificateRefused(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	c := e.client(t, &admin)
	if _, err := c.Locks(ctx); err != nil {
		t.Fatal(err)
	}
	// client issues certificates for an hour; the handshake uses the real
	// clock, the handler a clock past the certificate's expiry.
	e.skew.Store(int64(time.Hour + time.Minute))
	_, err := c.Lock(ctx, adminapi.LockRequest{Target: locks.TargetOf(alice), Reason: "x"})
	if status(err) != http.StatusUnauthorized || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("lock with an expired certificate: %v, want 401", err)
	}
	if _, ok := e.set.Locked(alice, time.Now().Add(time.Hour)); ok {
		t.Fatal("a lock by an expired certificate took effect")
	}
	ev, ok := e.audit.last(audit.TypeAuthDenied)
	if !ok || !strings.Contains(ev.Denied.Reason, "user.lock: client certificate expired") || ev.Denied.Path != adminapi.PathLocks {
		t.Fatalf("expired certificate refusal not audited: %+v", ev)
	}
}

func TestKillOneSession(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	one, _ := e.reg.Register(ctx, sessions.Session{ID: "one", Principal: alice, Cluster: "dev", Kind: sessions.KindExec, Target: "default/web/app"})
	two, _ := e.reg.Register(ctx, sessions.Session{ID: "two", Principal: alice, Cluster: "dev", Kind: sessions.KindExec, Target: "default/web/app"})
	one.AddBytes(3, 40)
	c := e.client(t, &admin)

	list, err := c.Sessions(ctx)
	if err != nil || len(list) != 2 || list[0].Principal.Name != "alice" {
		t.Fatalf("Sessions = %+v, %v", list, err)
	}
	info, err := c.Kill(ctx, "one")
	if err != nil {
		t.Fatal(err)
	}
	if info.Reason != sessions.ReasonKilled || info.BytesOut != 40 {
		t.Fatalf("killed info %+v", info)
	}
	if one.Ended() == nil || two.Ended() != nil {
		t.Fatal("kill ended the wrong sessions")
	}
	if got := <-e.killed; got.ID != "one" || got.Cluster != "dev" {
		t.Fatalf("OnKill got %+v", got)
	}
	if ev, ok := e.audit.last(audit.TypeSessionKill); !ok || ev.SessionID != "one" || ev.Fields["user"] != "user:alice" {
		t.Fatalf("session.kill event %+v", ev)
	}
	if _, err := c.Kill(ctx, "one"); status(err) != http.StatusNotFound {
		t.Fatalf("kill of ended session: %v, want 404", err)
	}
	if _, err := c.Kill(ctx, "a%2Fb"); status(err) != http.StatusBadRequest && status(err) != http.StatusNotFound {
		t.Fatalf("kill of bad id: %v, want 400", err)
	}
}

func TestAuditFailure(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	c := e.client(t, &admin)
	e.audit.setBroken(true)
	_, err := c.Lock(ctx, adminapi.LockRequest{Target: locks.TargetOf(alice), Reason: "incident"})
	if status(err) != http.StatusServiceUnavailable || !strings.Contains(err.Error(), "lock is in force") {
		t.Fatalf("lock with audit down: %v", err)
	}
	if _, ok := e.set.Locked(alice, time.Now()); !ok {
		t.Fatal("lock did not take effect while audit was down")
	}
	_, err = c.Unlock(ctx, locks.TargetOf(alice))
	if status(err) != http.StatusServiceUnavailable || !strings.Contains(err.Error(), "stays in force") {
		t.Fatalf("unlock with audit down: %v", err)
	}
	if _, ok := e.set.Locked(alice, time.Now()); !ok {
		t.Fatal("unaudited unlock took effect in the set")
	}
	if l, _ := e.store.List(ctx, time.Now()); len(l) != 1 {
		t.Fatalf("unaudited unlock took effect in the store: %+v", l)
	}
	e.audit.setBroken(false)
	if _, err := c.Unlock(ctx, locks.TargetOf(alice)); err != nil {
		t.Fatal(err)
	}
}

func TestBadLockRequests(t *testing.T) {
	e := setup(t)
	c := e.client(t, &admin)
	tests := []struct {
		name string
		req  adminapi.LockRequest
	}{
		{"no reason", adminapi.LockRequest{Target: locks.TargetOf(alice)}},
		{"no target", adminapi.LockRequest{Reason: "x"}},
		{"bad kind", adminapi.LockRequest{Target: locks.Target{Kind: "group", Name: "dev"}, Reason: "x"}},
		{"bad ttl", adminapi.LockRequest{Target: locks.TargetOf(alice), Reason: "x", TTL: "soon"}},
		{"tiny ttl", adminapi.LockRequest{Target: locks.TargetOf(alice), Reason: "x", TTL: "1ms"}},
		{"negative ttl", adminapi.LockRequest{Target: locks.TargetOf(alice), Reason: "x", TTL: "-1h"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Lock(context.Background(), tt.req)
			if status(err) != http.StatusBadRequest {
				t.Fatalf("got %v, want 400", err)
			}
			t.Log(err)
		})
	}
}

func TestParseLockRequest(t *testing.T) {
	now := time.Now()
	tests := []struct {
		body string
		ok   bool
	}{
		{`{"target":{"kind":"user","name":"alice"},"reason":"r"}`, true},
		{`{"target":{"kind":"bot","name":"ci"},"reason":"r","ttl":"30m"}`, true},
		{`{"target":{"kind":"user","name":"alice"},"reason":"r","extra":1}`, false},
		{`{"target":{"kind":"user","name":"alice"},"reason":"r"} {}`, false},
		{`{"target":{"kind":"user","name":"alice"},"reason":"a\nb"}`, false},
		{`[]`, false},
		{``, false},
	}
	for _, tt := range tests {
		l, err := adminapi.ParseLockRequest([]byte(tt.body), admin, now)
		if (err == nil) != tt.ok {
			t.Errorf("ParseLockRequest(%s) = %+v, %v; want ok=%v", tt.body, l, err, tt.ok)
		}
	}
}

func FuzzParseLockRequest(f *testing.F) {
	f.Add(`{"target":{"kind":"user","name":"alice"},"reason":"r","ttl":"1h"}`)
	f.Add(`{"target":{"kind":"bot","name":"x"},"reason":"\u0000"}`)
	f.Add(`{"ttl":"9999999h"}`)
	now := time.Now()
	f.Fuzz(func(t *testing.T, body string) {
		l, err := adminapi.ParseLockRequest([]byte(body), admin, now)
		if err == nil && l.Validate() != nil {
			t.Fatalf("accepted invalid lock %+v", l)
		}
	})
}

// TestLocalUnlockAndSync: the break-glass (Local) changes the lock store
// with no certificate, audited by the host's user with via=local; the
// proxy's SyncLocks puts the change in force and pushes it to the workers.
// With the audit trail down, a local unlock is undone.
func TestLocalUnlockAndSync(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	other := identity.Principal{Kind: identity.KindUser, Name: "other-admin", Traits: admin.Traits}
	if _, err := e.client(t, &other).Lock(ctx, adminapi.LockRequest{Target: locks.TargetOf(admin), Reason: "stolen laptop"}); err != nil {
		t.Fatal(err)
	}
	<-e.pushed
	host := identity.Principal{Kind: identity.KindUser, Name: "root"}
	local := adminapi.Local{Store: e.store, Audit: e.audit, By: host, Fields: map[string]string{"host": "proxy-1"}}

	e.audit.setBroken(true)
	if _, err := local.Unlock(ctx, locks.TargetOf(admin)); err == nil || !strings.Contains(err.Error(), "stays in force") {
		t.Fatalf("local unlock with the audit trail down: %v", err)
	}
	if l, _ := e.store.List(ctx, time.Now()); len(l) != 1 {
		t.Fatalf("an unaudited local unlock took effect in the store: %+v", l)
	}
	e.audit.setBroken(false)

	l, err := local.Unlock(ctx, locks.TargetOf(admin))
	if err != nil || l.Reason != "stolen laptop" {
		t.Fatalf("local unlock: %+v, %v", l, err)
	}
	if _, ok := e.set.Locked(admin, time.Now()); !ok {
		t.Fatal("the set changed before the proxy synced with its store")
	}
	if err := e.h.SyncLocks(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.set.Locked(admin, time.Now()); ok {
		t.Fatal("still locked after SyncLocks")
	}
	if c := <-e.pushed; c.Op != locks.OpRemove || c.Lock.Target != locks.TargetOf(admin) {
		t.Fatalf("pushed %+v, want the removal", c)
	}
	ev, ok := e.audit.last(audit.TypeUserUnlock)
	if !ok || ev.Principal.String() != "user:root" || ev.Fields["via"] != "local" || ev.Fields["host"] != "proxy-1" || ev.Fields["target"] != "user:root-admin" {
		t.Fatalf("user.unlock event %+v", ev)
	}

	// A local lock, synced the same way, names where it came from.
	if _, err := local.Lock(ctx, adminapi.LockRequest{Target: locks.TargetOf(alice), Reason: "incident 9"}); err != nil {
		t.Fatal(err)
	}
	if err := e.h.SyncLocks(ctx); err != nil {
		t.Fatal(err)
	}
	err = e.set.Check(alice, time.Now())
	if err == nil || !strings.Contains(err.Error(), "locked by local:root: incident 9") {
		t.Fatalf("alice after a local lock: %v", err)
	}
	if err := e.h.SyncLocks(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-e.pushed:
		if c.Op != locks.OpSet || c.Lock.Target != locks.TargetOf(alice) {
			t.Fatalf("pushed %+v, want alice's lock", c)
		}
	default:
		t.Fatal("the local lock was not pushed")
	}
	select {
	case c := <-e.pushed:
		t.Fatalf("a sync with nothing new pushed %+v", c)
	default:
	}
}
