package e2e

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/impersonate"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/proxy"
	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/tunnel"
	"github.com/limenhq/limen/gateway/worker"
	"github.com/limenhq/limen/test/cluster/clustertest"
)

// hops is the proxy and worker request path in one process, joined by a
// loopback TCP connection (which half-closes, as a tunnel stream does)
// instead of the tunnel, in front of the real API server with the
// worker's real ServiceAccount token. It lets a test change one thing at one
// hop — a key, a clock, a policy, the audit store — that the real binaries
// do not let a client reach.
type hops struct {
	store     *audit.Store
	storePath string
	kube      *proxy.Kube
	worker    *worker.Handler
	opener    *pipeOpener
	baseURL   string
}

// failOnPanic fails the test when the proxy's HTTP server logs a recovered
// panic.
type failOnPanic struct{ t *testing.T }

func (f failOnPanic) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("panic")) {
		f.t.Errorf("the proxy panicked: %s", p)
	}
	return len(p), nil
}

type pipeOpener struct {
	worker func() *worker.Handler
	none   bool
}

func (o *pipeOpener) Open(ctx context.Context, cluster string) (net.Conn, error) {
	if o.none {
		return nil, fmt.Errorf("%w %q", tunnel.ErrNoWorker, cluster)
	}
	client, server, err := loopbackPair()
	if err != nil {
		return nil, err
	}
	go o.worker().ServeStream(context.Background(), server)
	return client, nil
}

// loopbackPair returns the two ends of a new loopback TCP connection.
func loopbackPair() (net.Conn, net.Conn, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	type accepted struct {
		c   net.Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		c, err := ln.Accept()
		ch <- accepted{c, err}
	}()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return nil, nil, err
	}
	a := <-ch
	if a.err != nil {
		client.Close()
		return nil, nil, a.err
	}
	return client, a.c, nil
}

func newHops(t *testing.T) *hops {
	t.Helper()
	c := clustertest.Cluster(t)
	e := gateway(t)
	ctx := context.Background()
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	pol, err := policy.New(ctx, policy.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pol.Close() })
	storePath := filepath.Join(t.TempDir(), audit.FileName)
	store, err := audit.Open(ctx, storePath, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	upstream, rt, err := worker.Upstream(c.Server, c.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	demo := policy.Cluster{Name: "demo", Labels: map[string]string{"env": "dev"}}
	h := &hops{store: store, storePath: storePath}
	h.worker = &worker.Handler{
		Cluster: demo, GrantKey: pub, Policy: pol, Upstream: upstream, Transport: rt,
		Token: (&worker.TokenFile{Path: e.TokenFile}).Token, Logger: slog.New(slog.DiscardHandler), Now: time.Now,
		Impersonation: impersonate.Config{Mode: e.RBAC()}, // the RBAC the token holds
	}
	// Session events reach the proxy as the control stream brings them.
	h.worker.Events = func(ctx context.Context, ev audit.Event) error { return h.kube.SessionEvent(ctx, demo.Name, ev) }
	h.opener = &pipeOpener{worker: func() *worker.Handler { return h.worker }}
	h.kube = &proxy.Kube{
		Authenticate: func(*http.Request) (identity.Principal, time.Time, error) {
			return identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "alice", Traits: map[string][]string{"groups": {"dev"}}},
				time.Now().Add(time.Hour), nil
		},
		Policy: pol, Tunnel: h.opener, Audit: store, Starts: store, GrantKey: priv,
		// The proxy accepts a worker's session events only for sessions
		// it relays, which its registry knows.
		Sessions: proxySessions(t),
		Clusters: func(string) policy.Cluster { return demo },
		Logger:   slog.New(slog.DiscardHandler), Now: time.Now,
	}
	srv := httptest.NewUnstartedServer(h.kube)
	// A handler that panics is a failure even if the client saw nothing.
	srv.Config.ErrorLog = log.New(failOnPanic{t}, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	h.baseURL = srv.URL
	return h
}

func proxySessions(t *testing.T) *sessions.Registry {
	reg := sessions.New(sessions.Config{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(reg.Close)
	return reg
}

// recordStreams lets the worker relay exec, attach and port-forward as the
// limen worker does: a spool of its own and HTTP/1.1 for upgrades. It
// returns a kubeconfig for the hops.
func (h *hops) recordStreams(t *testing.T) string {
	t.Helper()
	c := clustertest.Cluster(t)
	spool, err := recording.OpenSpool(filepath.Join(t.TempDir(), "spool"))
	if err != nil {
		t.Fatal(err)
	}
	h.worker.Spool = spool
	if h.worker.Upgrades, err = worker.UpgradeTransport(c.CAFile); err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: demo, cluster: {server: %q}}]\n"+
		"users: [{name: alice, user: {}}]\ncontexts: [{name: demo, context: {cluster: demo, user: alice}}]\ncurrent-context: demo\n",
		h.baseURL+"/k8s/demo")
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return kc
}

func (h *hops) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(h.baseURL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// lastEvent returns the newest audit event of a type, once every event
// queued so far is committed: the proxy queues a request's outcome before
// it relays the response, but does not wait for its commit.
func (h *hops) lastEvent(t *testing.T, typ audit.Type) audit.Event {
	t.Helper()
	if err := h.store.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	evs, err := h.store.Search(context.Background(), audit.Query{Type: typ, Limit: 1})
	if err != nil || len(evs) == 0 {
		t.Fatalf("no %s event (err %v)", typ, err)
	}
	return evs[len(evs)-1]
}

const listPath = "/k8s/demo/api/v1/namespaces/default/configmaps"

func TestHopsForwardAndAudit(t *testing.T) {
	h := newHops(t)
	if code, body := h.get(t, listPath); code != http.StatusOK || !strings.Contains(body, `"kind":"ConfigMapList"`) {
		t.Fatalf("list: %d %s", code, body)
	}
	ev := h.lastEvent(t, audit.TypeKubeRequest)
	k := ev.Kube
	if ev.Principal.Name != "alice" || k.Verb != "list" || k.Resource != "configmaps" || k.Namespace != "default" ||
		k.Status != 200 || k.Path != "/api/v1/namespaces/default/configmaps" || ev.SessionID == "" {
		t.Fatalf("audit event = %+v %+v", ev, k)
	}
}

func TestHopsRefuseBadGrants(t *testing.T) {
	tests := []struct {
		name   string
		change func(h *hops)
		code   int
		reason string
	}{
		{"forged", func(h *hops) {
			_, other, _ := ed25519.GenerateKey(rand.Reader)
			h.kube.GrantKey = other
		}, http.StatusForbidden, "signature invalid"},
		{"expired", func(h *hops) {
			h.kube.GrantTTL = time.Minute
			h.kube.Now = func() time.Time { return time.Now().Add(-time.Hour) }
			// The proxy's own watchdog refuses an expired grant first
			// (session refused); this case is the worker's check.
			h.kube.Sessions = nil
		}, http.StatusForbidden, "expired"},
		{"other cluster", func(h *hops) { h.worker.Cluster.Name = "prod" }, http.StatusServiceUnavailable, "another cluster"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHops(t)
			tt.change(h)
			code, body := h.get(t, listPath)
			if code != tt.code || strings.Contains(body, "ConfigMapList") {
				t.Fatalf("status %d (%s), want %d", code, body, tt.code)
			}
			ev := h.lastEvent(t, audit.TypeAuthDenied)
			if ev.Denied.Hop != audit.HopWorker || !strings.Contains(ev.Denied.Reason, tt.reason) {
				t.Fatalf("auth.denied = %+v, want hop worker and reason with %q", ev.Denied, tt.reason)
			}
		})
	}
}

// dropGroups stands in for a worker whose own policy snapshot changed: it
// allows only the listed groups. The real engine's AllowGroups is tested in
// gateway/policy; what is tested here is what the worker does with less.
type dropGroups struct{ keep []string }

func (d dropGroups) AllowGroups(_ context.Context, _ identity.Principal, _ policy.Cluster, groups []string) ([]string, string, error) {
	var out []string
	for _, g := range groups {
		if slices.Contains(d.keep, g) {
			out = append(out, g)
		}
	}
	return out, "changed-on-worker", nil
}

func TestHopsWorkerPolicyDropsGroups(t *testing.T) {
	h := newHops(t)
	h.worker.Policy = dropGroups{keep: []string{"limen:view"}}
	resp, err := http.Post(h.baseURL+"/k8s/demo/apis/authentication.k8s.io/v1/selfsubjectreviews", "application/json",
		strings.NewReader(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`))
	if err != nil {
		t.Fatal(err)
	}
	var review struct {
		Status struct{ UserInfo userInfo } `json:"status"`
	}
	err = json.NewDecoder(resp.Body).Decode(&review)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if g := review.Status.UserInfo.Groups; !slices.Contains(g, "limen:view") || slices.Contains(g, "limen:edit") {
		t.Fatalf("groups at the API server %v, want limen:view without limen:edit", g)
	}
	h.worker.Policy = dropGroups{}
	if code, _ := h.get(t, listPath); code != http.StatusForbidden {
		t.Fatalf("no group left: %d, want 403", code)
	}
	if ev := h.lastEvent(t, audit.TypeAuthDenied); ev.Denied.Hop != audit.HopWorker {
		t.Fatalf("auth.denied = %+v", ev.Denied)
	}
}

func TestHopsAuditDownDropsTheResponse(t *testing.T) {
	h := newHops(t)
	h.store.Close()
	code, body := h.get(t, listPath)
	if code != http.StatusServiceUnavailable || strings.Contains(body, "ConfigMapList") {
		t.Fatalf("audit down: %d %s, want 503 without the response", code, body)
	}
}

func TestHopsOperatorProblemsAre503(t *testing.T) {
	h := newHops(t)
	h.worker.Token = (&worker.TokenFile{Path: filepath.Join(t.TempDir(), "missing")}).Token
	if code, body := h.get(t, listPath); code != http.StatusServiceUnavailable || !strings.Contains(body, "ServiceAccount token") {
		t.Fatalf("unreadable token: %d %s, want 503", code, body)
	}
	h.opener.none = true
	if code, body := h.get(t, listPath); code != http.StatusServiceUnavailable || !strings.Contains(body, "no Limen worker") {
		t.Fatalf("no worker: %d %s, want 503", code, body)
	}
}

// watch opens a watch through the hops and returns when its body ends.
func (h *hops) watch(t *testing.T) <-chan time.Time {
	t.Helper()
	resp, err := http.Get(h.baseURL + listPath + "?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("watch: %s", resp.Status)
	}
	ended := make(chan time.Time, 1)
	go func() {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		ended <- time.Now()
	}()
	return ended
}

func TestHopsGrantExpiryEndsAnIdleStream(t *testing.T) {
	h := newHops(t)
	quiet := sessions.Config{Logger: slog.New(slog.DiscardHandler)}
	h.kube.Sessions, h.worker.Sessions = sessions.New(quiet), sessions.New(quiet)
	h.kube.GrantTTL = 2 * time.Second
	start := time.Now()
	select {
	case end := <-h.watch(t):
		if d := end.Sub(start); d < time.Second {
			t.Fatalf("the watch ended after %s, before its grant expired", d)
		}
		t.Logf("idle watch ended %s after it opened with a 2s grant", end.Sub(start).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("the watch outlived its grant")
	}
}

func TestHopsWorkerEnforcesLocksItself(t *testing.T) {
	h := newHops(t)
	set := locks.NewSet()
	h.worker.Locks = set
	tracked := sessions.New(sessions.Config{Locks: set, Logger: slog.New(slog.DiscardHandler)})
	h.worker.Sessions = tracked
	ended := h.watch(t)
	// The watch's headers have arrived, so the worker tracks it: the lock
	// below must end an open stream, not refuse a new one.
	if live := liveSessions(tracked); live != 1 {
		t.Fatalf("the worker tracks %d live sessions, want the watch", live)
	}
	set.Apply(locks.Change{Op: locks.OpSet, Lock: locks.Lock{
		Target: locks.Target{Kind: identity.KindUser, Name: "alice"}, Reason: "pushed to the worker only",
		CreatedBy: "user:admin", CreatedAt: time.Now(),
	}})
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the worker kept a locked user's watch open")
	}
	code, body := h.get(t, listPath)
	if code != http.StatusForbidden || !strings.Contains(body, "pushed to the worker only") {
		t.Fatalf("locked at the worker: %d %s", code, body)
	}
	if ev := h.lastEvent(t, audit.TypeAuthDenied); ev.Denied.Hop != audit.HopWorker || !strings.Contains(ev.Denied.Reason, "locked") {
		t.Fatalf("auth.denied = %+v", ev.Denied)
	}
}

func liveSessions(r *sessions.Registry) int {
	n := 0
	for _, i := range r.List() {
		if i.Live() {
			n++
		}
	}
	return n
}
