package proxy_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/adminapi"
	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/authapi"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/internal/apihttp"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/proxy"
)

var (
	rootAdmin  = identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "root", Traits: map[string][]string{"groups": {"admins"}}}
	otherAdmin = identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "other", Traits: map[string][]string{"groups": {"admins"}}}
)

// apiClients are the identity and admin API clients of one certificate,
// sharing one HTTP/2 connection.
type apiClients struct {
	*authapi.Client
	admin *adminapi.Client
}

func (r *running) clients(t *testing.T, p identity.Principal, ttl time.Duration) apiClients {
	t.Helper()
	c := &authapi.Client{Client: apihttp.Client{Proxy: r.addr, HTTP: httpClient(r.tlsConfig(t, &p, ttl), true)}}
	return apiClients{Client: c, admin: adminapi.NewClient(c)}
}

func statusOf(err error) int {
	var se *apihttp.StatusError
	if errors.As(err, &se) {
		return se.Code
	}
	return 0
}

// adminRefusals returns the stored auth.denied events with action admin as
// "principal|reason".
func (r *running) adminRefusals(t *testing.T) []string {
	t.Helper()
	evs, err := r.Audit.Search(context.Background(), audit.Query{Action: audit.ActionAdmin})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		if ev.Type != audit.TypeAuthDenied || ev.Denied.Hop != audit.HopProxy || ev.Denied.Action != audit.ActionAdmin {
			t.Fatalf("--action admin found %+v", ev)
		}
		who := ev.Principal.String()
		if ev.Principal.Name == "" {
			who = "-"
		}
		out = append(out, who+"|"+ev.Denied.Reason)
	}
	return out
}

// TestLockedAdminRefused: through the proxy's port, a locked admin's
// certificate is refused when it unlocks itself, adds an admin or mints a
// join token; none of it takes effect, and each refusal is stored as
// auth.denied with action admin. Another admin can still unlock them.
func TestLockedAdminRefused(t *testing.T) {
	r := startProxy(t, proxy.Config{})
	ctx := context.Background()
	root, other := r.clients(t, rootAdmin, time.Hour), r.clients(t, otherAdmin, time.Hour)
	if _, err := root.ListUsers(ctx); err != nil {
		t.Fatalf("before the lock: %v", err)
	}
	if _, err := other.admin.Lock(ctx, adminapi.LockRequest{Target: locks.TargetOf(rootAdmin), Reason: "stolen laptop"}); err != nil {
		t.Fatal(err)
	}

	calls := []struct {
		what string
		call func() error
	}{
		{"user.unlock", func() error { _, err := root.admin.Unlock(ctx, locks.TargetOf(rootAdmin)); return err }},
		{"users.add", func() error {
			return root.AddUser(ctx, authapi.UserRequest{Name: "mallory", Password: "mallory-password", Traits: map[string][]string{"groups": {"admins"}}})
		}},
		{"tokens.create", func() error { _, err := root.CreateToken(ctx, authapi.TokenRequest{Cluster: testCluster}); return err }},
	}
	for _, c := range calls {
		if err := c.call(); statusOf(err) != http.StatusForbidden || !strings.Contains(err.Error(), "user root is locked by user:other: stolen laptop") {
			t.Errorf("locked admin's %s: %v, want 403 naming the lock", c.what, err)
		}
	}
	if _, ok := r.LockSet.Locked(rootAdmin, time.Now()); !ok {
		t.Fatal("the locked admin's unlock took effect")
	}
	if us, err := r.Users.List(ctx); err != nil || len(us) != 0 {
		t.Fatalf("users after the locked admin's add: %+v, %v", us, err)
	}
	if ts, err := r.Tokens.List(ctx); err != nil || len(ts) != 0 {
		t.Fatalf("join tokens after the locked admin's mint: %+v, %v", ts, err)
	}
	got := r.adminRefusals(t)
	if len(got) != len(calls) {
		t.Fatalf("auth.denied with action admin:\n%s\nwant %d", strings.Join(got, "\n"), len(calls))
	}
	for i, c := range calls {
		if want := "user:root|admin action " + c.what + ": locked: user root is locked by user:other"; !strings.HasPrefix(got[i], want) {
			t.Errorf("refusal %d: %q, want %q…", i, got[i], want)
		}
	}

	if _, err := other.admin.Unlock(ctx, locks.TargetOf(rootAdmin)); err != nil {
		t.Fatalf("another admin unlocks: %v", err)
	}
	if _, err := root.CreateToken(ctx, authapi.TokenRequest{Cluster: testCluster}); err != nil {
		t.Fatalf("after the unlock: %v", err)
	}
}

// TestExpiredCertificateOnOpenConnection: a certificate that expires while
// its HTTP/2 connection stays open is refused on that same connection, for
// admin calls and whoami alike, and the refusals are stored as auth.denied
// with action admin (counted, since an expired certificate authenticates
// nobody). The proxy's clock is a test clock; TLS verified the
// certificate at the handshake with the real one.
func TestExpiredCertificateOnOpenConnection(t *testing.T) {
	var skew atomic.Int64
	r := startProxy(t, proxy.Config{Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }})
	ctx := context.Background()
	var conns, reused atomic.Int64
	trace := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		conns.Add(1)
		if i.Reused {
			reused.Add(1)
		}
	}})
	root := r.clients(t, rootAdmin, time.Hour)
	who, err := root.WhoAmI(trace)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.ListUsers(trace); err != nil {
		t.Fatal(err)
	}

	skew.Store(int64(time.Until(who.Expires) + time.Second))
	if _, err := root.admin.Lock(trace, adminapi.LockRequest{Target: locks.TargetOf(otherAdmin), Reason: "x"}); statusOf(err) != http.StatusUnauthorized ||
		!strings.Contains(err.Error(), "client certificate expired") {
		t.Fatalf("lock with an expired certificate: %v, want 401", err)
	}
	if _, err := root.CreateToken(trace, authapi.TokenRequest{Cluster: testCluster}); statusOf(err) != http.StatusUnauthorized {
		t.Fatalf("mint a token with an expired certificate: %v, want 401", err)
	}
	if _, err := root.WhoAmI(trace); statusOf(err) != http.StatusUnauthorized {
		t.Fatalf("whoami with an expired certificate: %v, want 401", err)
	}
	if conns.Load() != 5 || reused.Load() != 4 {
		t.Fatalf("%d requests, %d on a reused connection: the test must run on one open connection", conns.Load(), reused.Load())
	}
	if _, ok := r.LockSet.Locked(otherAdmin, time.Now()); ok {
		t.Fatal("a lock by an expired certificate took effect")
	}
	// An expired certificate authenticates nobody, so its refusals are
	// counted like any unauthenticated client's: the first stored at
	// once, the rest when the interval ends (here, at Close), naming the
	// holder in the reason.
	if got := r.adminRefusals(t); len(got) != 1 || !strings.HasPrefix(got[0], "-|admin action user.lock: client certificate expired at ") ||
		!strings.HasSuffix(got[0], "(user:root): run limen login") {
		t.Fatalf("auth.denied with action admin before the interval ends: %q", got)
	}
	r.Denials.Close()
	evs, err := r.Audit.Search(ctx, audit.Query{Action: audit.ActionAdmin})
	if err != nil || len(evs) != 2 || evs[1].Denied.Count != 2 || !strings.HasPrefix(evs[1].Denied.Reason, "GET /v1/whoami: client certificate expired at ") {
		t.Fatalf("auth.denied with action admin after Close: %+v, %v; want the two others counted", evs, err)
	}
	// Not a TLS-level refusal: the handshake itself would refuse it now.
	if _, err := tls.Dial("tcp", r.addr, r.tlsConfig(t, &rootAdmin, time.Hour)); err != nil {
		t.Fatalf("a fresh certificate on a new connection: %v", err)
	}
}
