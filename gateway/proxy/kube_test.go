package proxy_test

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/grant"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/proxy"
	"github.com/limenhq/limen/gateway/scope"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/tunnel"
)

// The proxy's decisions without a control plane or a worker: the worker is
// a stand-in (named as such) on the far end of a pipe that records what the
// proxy sent and answers as told.

// fixedPolicy decides as told: the groups, and the scope (nil: kubectl's
// unscoped one).
type fixedPolicy struct {
	groups   []string
	revision string
	err      error
	scope    *scope.Scope
}

func (f fixedPolicy) Groups(context.Context, identity.Principal, policy.Cluster) (policy.Decision, error) {
	sc := f.scope
	if sc == nil {
		sc = scope.Unrestricted(identity.ClientKubectl)
	}
	return policy.Decision{Groups: f.groups, Revision: f.revision, Scope: sc}, f.err
}

// standInWorker answers one stream: it reads the grant and the request,
// then writes the audit event ev (its session ID filled in from the grant
// unless set) and a 200 response.
type standInWorker struct {
	grantKey ed25519.PublicKey
	ev       audit.Event
	noWorker bool
	got      chan *http.Request
	grants   chan grant.Grant
	requests chan grant.Request // each stream's preamble beside its grant
	// answered, if set, is closed once the proxy has read the whole answer.
	answered chan struct{}
}

func (w *standInWorker) Open(_ context.Context, cluster string) (net.Conn, error) {
	if w.noWorker {
		return nil, fmt.Errorf("%w %q", tunnel.ErrNoWorker, cluster)
	}
	client, server := net.Pipe()
	go func() {
		defer server.Close()
		br := bufio.NewReader(server)
		tok, err := grant.ReadPreamble(br, grant.MaxTokenSize)
		if err != nil {
			return
		}
		g, err := grant.Verify(w.grantKey, tok, cluster, time.Now())
		if err != nil {
			return
		}
		preq, err := grant.ReadRequest(br)
		if err != nil {
			return
		}
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		w.got <- req
		w.grants <- g
		w.requests <- preq
		ev := w.ev
		ev.Time, ev.Principal, ev.Cluster = time.Now(), g.Principal, cluster
		if ev.SessionID == "" {
			ev.SessionID = preq.SessionID
		}
		if audit.WriteEvent(server, ev) != nil {
			return
		}
		_, _ = io.WriteString(server, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 9\r\n\r\nrelayed!\n")
		if w.answered != nil {
			close(w.answered) // a pipe's write returns once it was read
		}
	}()
	return client, nil
}

type front struct {
	kube   *proxy.Kube
	store  *audit.Store
	worker *standInWorker
	url    string
	locks  *locks.Set
}

func newFront(t *testing.T) *front {
	t.Helper()
	store, err := audit.Open(context.Background(), filepath.Join(t.TempDir(), audit.FileName), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	w := &standInWorker{grantKey: pub, got: make(chan *http.Request, 1), grants: make(chan grant.Grant, 1), requests: make(chan grant.Request, 1),
		ev: audit.Event{Type: audit.TypeKubeRequest, Kube: &audit.KubeRequest{Method: "GET", Path: "/api", Status: 200}}}
	set := locks.NewSet()
	f := &front{store: store, worker: w, locks: set}
	f.kube = &proxy.Kube{
		Authenticate: func(r *http.Request) (identity.Principal, time.Time, error) {
			if r.Header.Get("X-Test-Anonymous") != "" {
				return identity.Principal{}, time.Time{}, errors.New("no client certificate")
			}
			return alice, time.Now().Add(time.Hour), nil
		},
		Policy: fixedPolicy{groups: []string{"limen:edit"}}, Tunnel: w, Audit: store, GrantKey: priv, Locks: set,
		Sessions: sessions.New(sessions.Config{Locks: set, Logger: slog.New(slog.DiscardHandler)}),
		Clusters: func(name string) policy.Cluster { return policy.Cluster{Name: name} },
		Logger:   slog.New(slog.DiscardHandler), Now: time.Now,
	}
	srv := httptest.NewServer(f.kube)
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

func (f *front) get(t *testing.T, path string, header map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, f.url+path, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// events returns the stored events of a type, once every event queued so
// far is committed: the proxy queues a request's outcome before it relays
// the response, but does not wait for its commit.
func (f *front) events(t *testing.T, typ audit.Type) []audit.Event {
	t.Helper()
	if err := f.store.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	evs, err := f.store.Search(context.Background(), audit.Query{Type: typ})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestProxyRefusals: what the proxy refuses never reaches a worker, and a
// verdict on the user is audited as the proxy's auth.denied.
func TestProxyRefusals(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(f *front)
		path   string
		header map[string]string
		code   int
		reason string // auth.denied's; "" when the refusal is not a denial
		msg    string
	}{
		{"non-canonical path", nil, "/k8s/demo/api/v1/namespaces/default/configmaps/%2e%2e/secrets", nil,
			http.StatusBadRequest, "non-canonical path", "not canonical"},
		{"not authenticated", nil, "/k8s/demo/api", map[string]string{"X-Test-Anonymous": "1"},
			http.StatusUnauthorized, "authentication: no client certificate", "run limen login"},
		{"locked", func(f *front) {
			f.locks.Apply(locks.Change{Op: locks.OpSet, Lock: locks.Lock{Target: locks.TargetOf(alice), Reason: "incident 42",
				CreatedBy: "user:admin", CreatedAt: time.Now()}})
		}, "/k8s/demo/api", nil, http.StatusForbidden, "locked: ", "incident 42"},
		{"policy grants no group", func(f *front) { f.kube.Policy = fixedPolicy{} }, "/k8s/demo/api", nil,
			http.StatusForbidden, "policy grants no group on demo", "grants alice no group"},
		{"policy unavailable", func(f *front) { f.kube.Policy = fixedPolicy{err: errors.New("no bundle")} }, "/k8s/demo/api", nil,
			http.StatusServiceUnavailable, "", "policy is unavailable"},
		{"no worker", func(f *front) { f.worker.noWorker = true }, "/k8s/demo/api", nil,
			http.StatusServiceUnavailable, "", "no Limen worker is connected"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFront(t)
			if tt.setup != nil {
				tt.setup(f)
			}
			code, body := f.get(t, tt.path, tt.header)
			if code != tt.code || !strings.Contains(body, tt.msg) {
				t.Fatalf("%d %s, want %d with %q", code, body, tt.code, tt.msg)
			}
			select {
			case r := <-f.worker.got:
				t.Fatalf("the worker got %s", r.URL)
			default:
			}
			denied := f.events(t, audit.TypeAuthDenied)
			if tt.reason == "" {
				if len(denied) != 0 {
					t.Fatalf("an operator problem was audited as a denial: %+v", denied[0].Denied)
				}
				return
			}
			if len(denied) != 1 || denied[0].Denied.Hop != audit.HopProxy || denied[0].Denied.Action != audit.ActionKube || !strings.HasPrefix(denied[0].Denied.Reason, tt.reason) {
				t.Fatalf("auth.denied %+v, want the proxy's with %q", denied, tt.reason)
			}
		})
	}
}

// TestProxyForwards: the worker gets the path below the cluster, no client
// identity header, and a grant the proxy signed for the policy's groups;
// the proxy's record of the request is stored before the response is
// relayed, and the worker's event after it as its outcome.
func TestProxyForwards(t *testing.T) {
	f := newFront(t)
	code, body := f.get(t, "/k8s/demo/api/v1/namespaces/default/configmaps", map[string]string{
		"Authorization": "Bearer stolen", "Impersonate-User": "admin", "X-Remote-Group": "system:masters",
		"X-Forwarded-For": "10.9.9.9", "Forwarded": "for=10.9.9.9", "X-Real-Ip": "10.9.9.9", "X-Forwarded-Host": "evil",
	})
	if code != http.StatusOK || body != "relayed!\n" {
		t.Fatalf("%d %q", code, body)
	}
	req, g, preq := <-f.worker.got, <-f.worker.grants, <-f.worker.requests
	if req.URL.Path != "/api/v1/namespaces/default/configmaps" {
		t.Fatalf("the worker got %s", req.URL.Path)
	}
	for _, h := range []string{"Authorization", "Impersonate-User", "X-Remote-Group", "Forwarded", "X-Real-Ip", "X-Forwarded-Host"} {
		if req.Header.Get(h) != "" {
			t.Fatalf("the client's %s reached the worker", h)
		}
	}
	if xff := req.Header.Values("X-Forwarded-For"); slices.ContainsFunc(xff, func(v string) bool { return strings.Contains(v, "10.9.9.9") }) {
		t.Fatalf("the client's claimed address reached the worker: X-Forwarded-For %q", xff)
	}
	if g.Principal.Name != "alice" || len(g.Groups) != 1 || g.Groups[0] != "limen:edit" || g.Cluster != "demo" {
		t.Fatalf("grant %+v", g)
	}
	// Durable before the response was relayed: read without Flush.
	sent, err := f.store.Search(context.Background(), audit.Query{Type: audit.TypeKubeSent})
	if err != nil {
		t.Fatal(err)
	}
	if len(sent) != 1 || sent[0].SessionID != preq.SessionID || sent[0].Principal.Name != "alice" || sent[0].Cluster != "demo" ||
		!slices.Equal(sent[0].Groups, []string{"limen:edit"}) || sent[0].Kube.Verb != "list" || sent[0].Kube.Resource != "configmaps" ||
		sent[0].Kube.Path != "/api/v1/namespaces/default/configmaps" || sent[0].ClientAddr == "" {
		t.Fatalf("kube.sent %+v, want the proxy's record of alice's list of configmaps on demo for session %s", sent, preq.SessionID)
	}
	if evs := f.events(t, audit.TypeKubeRequest); len(evs) != 1 || evs[0].SessionID != preq.SessionID {
		t.Fatalf("stored %+v, want the worker's kube.request for session %s", evs, preq.SessionID)
	}
	if evs := f.events(t, ""); len(evs) != 1 || evs[0].Type != audit.TypeKubeRequest {
		t.Fatalf("search shows %+v, want the kube.request alone: a kube.sent with its outcome says nothing more", evs)
	}
}

// heldRecord is an audit sink in front of a store that holds the commit of
// each request's record (kube.sent) until the worker has answered, then
// answers it with err. It has no Submit, so the proxy waits on its Emit,
// and it passes every other event on, then on stored.
type heldRecord struct {
	store    *audit.Store
	answered chan struct{}
	err      error
	stored   chan audit.Event
}

func (h *heldRecord) Emit(ctx context.Context, ev audit.Event) error {
	if ev.Type != audit.TypeKubeSent {
		err := h.store.Emit(ctx, ev)
		h.stored <- ev
		return err
	}
	<-h.answered
	if h.err != nil {
		return h.err
	}
	return h.store.Emit(ctx, ev)
}

// TestProxyRelaysOnlyDurablyRecordedRequests: the record of a request is
// committed while the request travels, and the response waits for it: a
// record whose commit fails after the worker answered drops the response
// with a 503, and its outcome is not stored either; one that succeeds late
// still relays it.
func TestProxyRelaysOnlyDurablyRecordedRequests(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		code int
		body string
	}{
		{"the record fails", fmt.Errorf("disk gone: %w", audit.ErrUnavailable), http.StatusServiceUnavailable, "audit trail is unavailable"},
		{"the record is late", nil, http.StatusOK, "relayed!\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFront(t)
			f.worker.answered = make(chan struct{})
			held := &heldRecord{store: f.store, answered: f.worker.answered, err: tt.err, stored: make(chan audit.Event, 1)}
			f.kube.Audit = held
			code, body := f.get(t, "/k8s/demo/api/v1/namespaces/default/configmaps", nil)
			<-f.worker.got
			if code != tt.code || !strings.Contains(body, tt.body) || tt.err != nil && strings.Contains(body, "relayed") {
				t.Fatalf("%d %q, want %d with %q", code, body, tt.code, tt.body)
			}
			if tt.err == nil {
				waitFor(t, held.stored, "the outcome is stored")
			}
			outcomes := f.events(t, audit.TypeKubeRequest)
			if tt.err != nil && len(outcomes) != 0 || tt.err == nil && len(outcomes) != 1 {
				t.Fatalf("stored outcomes %+v", outcomes)
			}
		})
	}
}

// TestProxyReusesTheGrantNotTheSession: back-to-back requests of one
// decision carry the same signed grant (no signature per request) but each
// its own session id; a new policy revision or other groups sign afresh.
func TestProxyReusesTheGrantNotTheSession(t *testing.T) {
	f := newFront(t)
	f.kube.Policy = fixedPolicy{groups: []string{"limen:edit"}, revision: "r1"}
	next := func() (grant.Grant, grant.Request) {
		t.Helper()
		if code, body := f.get(t, "/k8s/demo/api", nil); code != http.StatusOK {
			t.Fatalf("%d %q", code, body)
		}
		<-f.worker.got
		return <-f.worker.grants, <-f.worker.requests
	}
	g1, r1 := next()
	g2, r2 := next()
	if !g1.IssuedAt.Equal(g2.IssuedAt) {
		t.Fatalf("the second request got a new grant (issued %s, then %s): one signature per request", g1.IssuedAt, g2.IssuedAt)
	}
	if r1.SessionID == r2.SessionID {
		t.Fatalf("two requests share session id %s", r1.SessionID)
	}
	if evs := f.events(t, audit.TypeKubeRequest); len(evs) != 2 || evs[0].SessionID == evs[1].SessionID {
		t.Fatalf("audit: %+v, want two requests with their own session ids", evs)
	}
	for _, pol := range []fixedPolicy{
		{groups: []string{"limen:edit"}, revision: "r2"},
		{groups: []string{"limen:view"}, revision: "r2"},
	} {
		f.kube.Policy = pol
		g, _ := next()
		if g.IssuedAt.Equal(g1.IssuedAt) || !slices.Equal(g.Groups, pol.groups) {
			t.Fatalf("policy %+v: grant %+v reused across decisions", pol, g)
		}
	}
}

// TestProxyTrustsAWorkerOnlyForItsStream: an event for another session is
// not stored and the response is not relayed; with the audit store down,
// the response is dropped with a 503.
func TestProxyTrustsAWorkerOnlyForItsStream(t *testing.T) {
	f := newFront(t)
	f.worker.ev.SessionID = strings.Repeat("f", 32)
	if code, body := f.get(t, "/k8s/demo/api", nil); code != http.StatusBadGateway || strings.Contains(body, "relayed") {
		t.Fatalf("%d %q, want 502 without the response", code, body)
	}
	if evs := f.events(t, audit.TypeKubeRequest); len(evs) != 0 {
		t.Fatalf("stored another session's event: %+v", evs)
	}

	f = newFront(t)
	f.store.Close()
	if code, body := f.get(t, "/k8s/demo/api", nil); code != http.StatusServiceUnavailable || strings.Contains(body, "relayed") {
		t.Fatalf("audit down: %d %q, want 503 without the response", code, body)
	}
}

// TestSessionEvent: a worker reports only session events of its own
// cluster, for sessions the proxy relayed to it, in the name the proxy
// relayed them for: another name is refused, not corrected. Once the
// registry has forgotten a session, its end is attributed from the
// session.start the proxy stored, and refused without one.
func TestSessionEvent(t *testing.T) {
	f := newFront(t)
	ctx := context.Background()
	start := audit.Event{Type: audit.TypeSessionStart, Time: time.Now(), Cluster: "demo", Principal: alice,
		SessionID: strings.Repeat("a", 32), Session: &audit.Session{Kind: sessions.AuditKind, Login: "exec"}}
	kube := start
	kube.Type, kube.Session, kube.Kube = audit.TypeKubeRequest, nil, &audit.KubeRequest{Method: "GET", Path: "/api", Status: 200}
	if err := f.kube.SessionEvent(ctx, "demo", kube); !errors.Is(err, proxy.ErrForeignEvent) {
		t.Fatalf("kube.request on the control stream: %v, want ErrForeignEvent", err)
	}
	if err := f.kube.SessionEvent(ctx, "prod", start); !errors.Is(err, proxy.ErrForeignEvent) {
		t.Fatalf("another cluster's event: %v, want ErrForeignEvent", err)
	}
	if err := f.kube.SessionEvent(ctx, "demo", start); !errors.Is(err, proxy.ErrForeignEvent) {
		t.Fatalf("a session the proxy never relayed: %v, want ErrForeignEvent", err)
	}

	// A session the proxy relays, as ServeHTTP registers it.
	live, err := f.kube.Sessions.Track(ctx, sessions.Session{ID: start.SessionID, Principal: alice, Cluster: "demo",
		Kind: sessions.KindExec, Target: "default/p/app"})
	if err != nil {
		t.Fatal(err)
	}
	forged := start
	forged.Principal = identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "mallory"}
	if err := f.kube.SessionEvent(ctx, "demo", forged); !errors.Is(err, proxy.ErrForeignEvent) {
		t.Fatalf("session.start in another name: %v, want ErrForeignEvent", err)
	}
	if err := f.kube.SessionEvent(ctx, "demo", start); err != nil {
		t.Fatal(err)
	}
	evs := f.events(t, audit.TypeSessionStart)
	if len(evs) != 1 || evs[0].Principal.Name != "alice" || len(evs[0].Principal.Traits["groups"]) != 1 {
		t.Fatalf("stored %+v, want alice's session.start with the proxy's record of her", evs)
	}
	live.End(sessions.ReasonCompleted)

	// The registry forgets (a restart, or many sessions since): the end is
	// attributed from the stored start, and only with Starts.
	f.kube.Sessions = sessions.New(sessions.Config{Logger: slog.New(slog.DiscardHandler)})
	end := start
	end.Type = audit.TypeSessionEnd
	if err := f.kube.SessionEvent(ctx, "demo", end); !errors.Is(err, proxy.ErrForeignEvent) {
		t.Fatalf("a forgotten session's end without Starts: %v, want ErrForeignEvent", err)
	}
	f.kube.Starts = f.store
	if err := f.kube.SessionEvent(ctx, "prod", func() audit.Event { e := end; e.Cluster = "prod"; return e }()); !errors.Is(err, proxy.ErrForeignEvent) {
		t.Fatalf("a forgotten demo session's end from prod: %v, want ErrForeignEvent", err)
	}
	forged.Type = audit.TypeSessionEnd
	if err := f.kube.SessionEvent(ctx, "demo", forged); !errors.Is(err, proxy.ErrForeignEvent) {
		t.Fatalf("a forgotten session's end in another name: %v, want ErrForeignEvent", err)
	}
	if err := f.kube.SessionEvent(ctx, "demo", end); err != nil {
		t.Fatalf("a forgotten session's end: %v", err)
	}
	if evs := f.events(t, audit.TypeSessionEnd); len(evs) != 1 || evs[0].Principal.Name != "alice" {
		t.Fatalf("stored %+v, want alice's one session.end", evs)
	}

	// A session has one end: a second (the worker's, after the proxy
	// recorded the end of a stream whose worker it lost; or one delivered
	// again) is acknowledged and not stored.
	again := end
	again.Session = &audit.Session{Kind: sessions.AuditKind, Login: "exec", EndReason: audit.EndTunnelClosed, EndHop: audit.HopWorker}
	if err := f.kube.SessionEvent(ctx, "demo", again); err != nil {
		t.Fatalf("a second end of the session: %v, want it acknowledged", err)
	}
	if evs := f.events(t, audit.TypeSessionEnd); len(evs) != 1 || evs[0].Session.EndReason != "" {
		t.Fatalf("stored %+v, want the one first session.end", evs)
	}
}

// TestFullAuditRefusesRequests: with the audit database at its size limit,
// a request is refused before anything reaches a worker, with a 503 that
// names the limit and what to do. Without the up-front check, the worker's
// event is refused and the response dropped, saying the same.
func TestFullAuditRefusesRequests(t *testing.T) {
	f := newFront(t)
	full, err := audit.Open(context.Background(), filepath.Join(t.TempDir(), audit.FileName), audit.Options{MaxBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { full.Close() })
	f.store, f.kube.Audit, f.kube.AuditRoom = full, full, full.Room
	ev := audit.Event{Type: audit.TypeAuthDenied, Time: time.Now(),
		Denied: &audit.Denied{Hop: audit.HopProxy, Action: audit.ActionKube, Reason: strings.Repeat("filler ", 100)}}
	for i := 0; ; i++ {
		err := full.Emit(context.Background(), ev)
		if errors.Is(err, audit.ErrFull) {
			break
		}
		if err != nil || i == 10000 {
			t.Fatalf("filling a 64 KiB audit database: %v after %d events, want ErrFull", err, i)
		}
	}
	code, body := f.get(t, "/k8s/demo/api", nil)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "audit database is full") ||
		!strings.Contains(body, "audit-max-bytes, is 64 KiB") || !strings.Contains(body, "delete or archive old audit events") {
		t.Fatalf("%d %s, want 503 naming the limit and what to do", code, body)
	}
	select {
	case r := <-f.worker.got:
		t.Fatalf("the worker got %s while the audit database was full", r.URL)
	default:
	}

	f.kube.AuditRoom = nil
	code, body = f.get(t, "/k8s/demo/api", nil)
	<-f.worker.got
	if code != http.StatusServiceUnavailable || strings.Contains(body, "relayed") ||
		!strings.Contains(body, "audit-max-bytes, is 64 KiB), so the response was dropped") {
		t.Fatalf("%d %s, want the response dropped with a 503 naming the limit", code, body)
	}
}

// TestEachRequestNamesItsOwnLogin: two logins of one person (same groups,
// cluster and client, other login ids) alternate; every request's events,
// the proxy's kube.sent and the worker's kube.request, name the login of
// the certificate that made it, never the other's reused grant.
func TestEachRequestNamesItsOwnLogin(t *testing.T) {
	f := newFront(t)
	f.kube.Authenticate = func(r *http.Request) (identity.Principal, time.Time, error) {
		p := alice
		p.LoginID = r.Header.Get("X-Test-Login")
		return p, time.Now().Add(time.Hour), nil
	}
	logins := []string{"login-one", "login-two", "login-one", "login-two"}
	for _, id := range logins {
		if code, body := f.get(t, "/k8s/demo/api", map[string]string{"X-Test-Login": id}); code != http.StatusOK {
			t.Fatalf("%s: %d %q", id, code, body)
		}
		<-f.worker.got
		if g := <-f.worker.grants; g.Principal.LoginID != id {
			t.Errorf("the request of %s carried a grant of login %q", id, g.Principal.LoginID)
		}
		<-f.worker.requests
	}
	for _, typ := range []audit.Type{audit.TypeKubeSent, audit.TypeKubeRequest} {
		evs := f.events(t, typ)
		if len(evs) != len(logins) {
			t.Fatalf("%d %s events, want %d", len(evs), typ, len(logins))
		}
		got := map[string]int{}
		for _, ev := range evs {
			got[ev.Principal.LoginID]++
		}
		if got["login-one"] != 2 || got["login-two"] != 2 {
			t.Errorf("%s events by login id: %v, want two of each", typ, got)
		}
	}
}
