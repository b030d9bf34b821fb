package apihttp

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/locks"
)

type allowAll struct{}

func (allowAll) AdminAllow(context.Context, identity.Principal, string) (bool, error) {
	return true, nil
}

type discard struct{}

func (discard) Emit(context.Context, audit.Event) error { return nil }

func TestNewRequires(t *testing.T) {
	principal := func(*http.Request) (identity.Principal, error) { return identity.Principal{}, nil }
	full := Gate{Principal: principal, Locks: locks.NewSet(), Policy: allowAll{}, Audit: discard{}}
	for _, tt := range []struct {
		drop func(*Gate)
		want string
	}{
		{func(g *Gate) { g.Principal = nil }, "principal function is required"},
		{func(g *Gate) { g.Locks = nil }, "lock set is required"},
		{func(g *Gate) { g.Policy = nil }, "admin policy is required"},
		{func(g *Gate) { g.Audit = nil }, "audit sink is required"},
	} {
		g := full
		tt.drop(&g)
		if _, err := New("testapi", g); err == nil || !strings.Contains(err.Error(), "testapi: "+tt.want) {
			t.Errorf("New: %v, want %q", err, tt.want)
		}
	}
	g, err := New("testapi", full)
	if err != nil || g.Now == nil || g.ClientAddr == nil || g.Logger == nil {
		t.Fatalf("New(full) = %+v, %v", g, err)
	}
}

// A Principal function that accepts a request without a verified
// certificate (a wiring bug) must not get past the expiry check.
func TestGateRefusesWithoutVerifiedCertificate(t *testing.T) {
	lenient := func(*http.Request) (identity.Principal, error) {
		return identity.Principal{Kind: identity.KindUser, Name: "alice"}, nil
	}
	a, err := New("testapi", Gate{Principal: lenient, Locks: locks.NewSet(), Policy: allowAll{}, Audit: discard{}})
	if err != nil {
		t.Fatal(err)
	}
	called := false
	next := func(http.ResponseWriter, *http.Request, identity.Principal) { called = true }
	a.Authenticated("GET /v1/who", next)
	a.Admin("GET /v1/admin", "x", next)
	for _, path := range []string{"/v1/who", "/v1/admin"} {
		w := httptest.NewRecorder()
		a.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		if called || w.Code != http.StatusUnauthorized {
			t.Errorf("%s without TLS: called=%v, %d", path, called, w.Code)
		}
	}
	w := httptest.NewRecorder()
	a.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/nothing", nil))
	if w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), "no such API endpoint: GET /v1/nothing") ||
		w.Header().Get("Cache-Control") != "no-store" {
		t.Errorf("unknown endpoint: %d %s %v", w.Code, w.Body, w.Header())
	}
}

// TestDenyStoresEveryRefusal: a refusal reaches the real audit store
// whatever the client sent. Deny used to record the request path as sent,
// so a request with a long target (a 70 KB lock name) made an event over the
// audit trail's size limit, which the store refused: the refusal went
// unrecorded. The path and reason are now bounded.
func TestDenyStoresEveryRefusal(t *testing.T) {
	store, err := audit.Open(context.Background(), filepath.Join(t.TempDir(), audit.FileName), audit.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	long := strings.Repeat("a", 70<<10)
	refuse := func(*http.Request) (identity.Principal, error) {
		return identity.Principal{}, errors.New("no certificate " + long)
	}
	a, err := New("testapi", Gate{Principal: refuse, Locks: locks.NewSet(), Policy: allowAll{}, Audit: store,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	a.Admin("DELETE /v1/admin/locks/{kind}/{name}", "user.unlock", func(http.ResponseWriter, *http.Request, identity.Principal) {
		t.Fatal("the handler ran")
	})
	w := httptest.NewRecorder()
	a.ServeHTTP(w, httptest.NewRequest(http.MethodDelete, "/v1/admin/locks/user/"+long+"?x=secret", nil))
	if w.Code != http.StatusUnauthorized {
		t.Fatalf("%d, want 401", w.Code)
	}
	got, err := store.Search(context.Background(), audit.Query{Action: audit.ActionAdmin})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("%d auth.denied events stored, want 1", len(got))
	}
	d := got[0].Denied
	if !strings.HasPrefix(d.Path, "/v1/admin/locks/user/aaa") || len(d.Path) > audit.MaxRequestPath || strings.Contains(d.Path, "secret") ||
		!strings.HasPrefix(d.Reason, "admin action user.unlock: no certificate aaa") || len(d.Reason) > 2*maxReason {
		t.Fatalf("stored refusal: path %d bytes %.40q…, reason %d bytes %.60q…", len(d.Path), d.Path, len(d.Reason), d.Reason)
	}
}
