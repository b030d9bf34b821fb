package worker_test

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/grant"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/impersonate"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/worker"
)

// The worker's decisions, step by step, without a control plane: the API
// server is a stand-in (named as such) that records what reached it and
// answers what the test asks. What is under test is what the worker lets
// through, in which order, and what it audits.

var alice = identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "alice", Traits: map[string][]string{"groups": {"dev"}}}

// keepGroups stands in for the worker's own policy snapshot: it allows only
// the listed groups of those granted (the real engine is tested in
// gateway/policy).
type keepGroups []string

func (k keepGroups) AllowGroups(_ context.Context, _ identity.Principal, _ policy.Cluster, groups []string) ([]string, string, error) {
	var out []string
	for _, g := range groups {
		if slices.Contains(k, g) {
			out = append(out, g)
		}
	}
	return out, "rev-test", nil
}

// brokenPolicy is a policy engine that cannot answer.
type brokenPolicy struct{}

func (brokenPolicy) AllowGroups(context.Context, identity.Principal, policy.Cluster, []string) ([]string, string, error) {
	return nil, "", errors.New("bundle not loaded")
}

// seen is a request as the stand-in API server received it, with the
// session events the worker had stored by then.
type seen struct {
	method, path string
	header       http.Header
	stored       []audit.Event
}

// bench is a worker in front of a stand-in API server.
type bench struct {
	t      *testing.T
	h      *worker.Handler
	key    ed25519.PrivateKey
	spool  string
	caFile string                                       // verifies the stand-in API server
	answer func(w http.ResponseWriter, r *http.Request) // the stand-in's answer; default 200 JSON
	// traceParent is the proxy's traceparent serve sends in the preamble.
	traceParent string

	mu     sync.Mutex
	events []audit.Event // stored through Events
	reqs   []seen
	// sessions maps each token grant() signed to its stream's session id.
	sessions map[string]string
}

func newBench(t *testing.T) *bench {
	t.Helper()
	b := &bench{t: t}
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.reqs = append(b.reqs, seen{r.Method, r.URL.Path, r.Header.Clone(), slices.Clone(b.events)})
		answer := b.answer
		b.mu.Unlock()
		if answer != nil {
			answer(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"ConfigMapList","items":[]}`)
	}))
	t.Cleanup(api.Close)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	upstream, rt, err := worker.Upstream(api.URL, caFile)
	if err != nil {
		t.Fatal(err)
	}
	b.caFile = caFile
	b.spool = filepath.Join(t.TempDir(), "spool")
	spool, err := recording.OpenSpool(b.spool)
	if err != nil {
		t.Fatal(err)
	}
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	b.key = priv
	b.h = &worker.Handler{
		Cluster: policy.Cluster{Name: "demo", Labels: map[string]string{"env": "dev"}}, GrantKey: pub,
		Policy:   keepGroups{"limen:edit", "limen:view"},
		Upstream: upstream, Transport: rt,
		Token:  func() (string, error) { return "worker-sa-token", nil },
		Logger: slog.New(slog.DiscardHandler), Now: time.Now,
		Spool: spool,
		Events: func(_ context.Context, ev audit.Event) error {
			if err := ev.Validate(); err != nil {
				return err
			}
			b.mu.Lock()
			b.events = append(b.events, ev)
			b.mu.Unlock()
			return nil
		},
	}
	return b
}

// grant signs a grant for alice on demo with both groups, changed by mut.
func (b *bench) grant(mut func(*grant.Grant)) ([]byte, string) {
	b.t.Helper()
	sid, _ := grant.NewSessionID()
	g := grant.Grant{Principal: alice, Groups: []string{"limen:edit", "limen:view"}, Cluster: "demo",
		IssuedAt: time.Now().Add(-time.Second), ExpiresAt: time.Now().Add(time.Hour)}
	key := b.key
	if mut != nil {
		mut(&g)
	}
	tok, err := grant.Sign(key, g)
	if err != nil {
		b.t.Fatal(err)
	}
	b.mu.Lock()
	if b.sessions == nil {
		b.sessions = map[string]string{}
	}
	b.sessions[string(tok)] = sid // serve sends it beside the grant
	b.mu.Unlock()
	return tok, sid
}

// serve sends req with token over a new stream, as the proxy does, and
// returns the audit event ahead of the response and the response (body
// read).
func (b *bench) serve(token []byte, req *http.Request) (audit.Event, *http.Response, string) {
	b.t.Helper()
	client, server := net.Pipe()
	done := make(chan struct{})
	go func() { b.h.ServeStream(context.Background(), server); close(done) }()
	defer func() { client.Close(); <-done }()
	b.mu.Lock()
	sid := b.sessions[string(token)]
	b.mu.Unlock()
	if sid == "" { // a token grant() did not sign
		sid, _ = grant.NewSessionID()
	}
	go func() {
		if err := grant.WritePreamble(client, token); err != nil {
			return
		}
		if err := grant.WriteRequest(client, grant.Request{SessionID: sid, ClientAddr: "192.0.2.1:5555", TraceParent: b.traceParent}); err == nil {
			_ = req.Write(client)
		}
	}()
	br := bufio.NewReader(client)
	ev, err := audit.ReadEvent(br, 0)
	if err != nil {
		b.t.Fatalf("read the worker's audit event: %v", err)
	}
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		b.t.Fatalf("read the worker's response: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return ev, resp, string(body)
}

func (b *bench) seen() []seen {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.reqs)
}

func (b *bench) stored() []audit.Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.events)
}

func get(path string) *http.Request {
	r, _ := http.NewRequest(http.MethodGet, "http://worker"+path, nil)
	return r
}

// upgrade is an exec or attach request as kubectl sends it over WebSocket.
func upgrade(path string) *http.Request {
	r := get(path)
	r.Header.Set("Connection", "Upgrade")
	r.Header.Set("Upgrade", "websocket")
	r.Header.Set("Sec-WebSocket-Version", "13")
	r.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	r.Header.Set("Sec-WebSocket-Protocol", "v5.channel.k8s.io")
	return r
}

const (
	listPath = "/api/v1/namespaces/default/configmaps"
	execPath = "/api/v1/namespaces/default/pods/p/exec?command=touch&command=/tmp/mark&container=app&stdout=true"
)

// TestAdmissionRefusals: what admit refuses, the API server never sees,
// and the refusal is audited: auth.denied for a verdict on the user,
// kube.request for the rest, with no groups before the re-check ran.
func TestAdmissionRefusals(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(b *bench) []byte
		path   string
		code   int
		typ    audit.Type
		reason string // auth.denied's reason, or a piece of the message
	}{
		{"forged grant", func(b *bench) []byte {
			_, other, _ := ed25519.GenerateKey(rand.Reader)
			b.key = other
			tok, _ := b.grant(nil)
			return tok
		}, listPath, http.StatusForbidden, audit.TypeAuthDenied, "grant: "},
		{"expired grant", func(b *bench) []byte {
			tok, _ := b.grant(func(g *grant.Grant) {
				g.IssuedAt, g.ExpiresAt = time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
			})
			return tok
		}, listPath, http.StatusForbidden, audit.TypeAuthDenied, "expired"},
		{"grant for another cluster", func(b *bench) []byte {
			tok, _ := b.grant(func(g *grant.Grant) { g.Cluster = "prod" })
			return tok
		}, listPath, http.StatusServiceUnavailable, audit.TypeAuthDenied, "grant for another cluster"},
		{"locked", func(b *bench) []byte {
			set := locks.NewSet()
			set.Apply(locks.Change{Op: locks.OpSet, Lock: locks.Lock{Target: locks.TargetOf(alice), Reason: "incident 42",
				CreatedBy: "user:admin", CreatedAt: time.Now()}})
			b.h.Locks = set
			tok, _ := b.grant(nil)
			return tok
		}, listPath, http.StatusForbidden, audit.TypeAuthDenied, "incident 42"},
		{"non-canonical path", func(b *bench) []byte {
			tok, _ := b.grant(nil)
			return tok
		}, "/api/v1/namespaces/default/configmaps/../secrets", http.StatusBadRequest, audit.TypeKubeRequest, "not canonical"},
		{"policy allows none", func(b *bench) []byte {
			b.h.Policy = keepGroups{}
			tok, _ := b.grant(nil)
			return tok
		}, listPath, http.StatusForbidden, audit.TypeAuthDenied, "worker policy allows none"},
		{"policy unavailable", func(b *bench) []byte {
			b.h.Policy = brokenPolicy{}
			tok, _ := b.grant(nil)
			return tok
		}, listPath, http.StatusServiceUnavailable, audit.TypeKubeRequest, "policy is unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBench(t)
			tok := tt.setup(b)
			ev, resp, body := b.serve(tok, get(tt.path))
			if resp.StatusCode != tt.code || ev.Type != tt.typ {
				t.Fatalf("%d with %s, want %d with %s (%s)", resp.StatusCode, ev.Type, tt.code, tt.typ, body)
			}
			if ev.Type == audit.TypeAuthDenied && (ev.Denied.Hop != audit.HopWorker || ev.Denied.Action != audit.ActionKube || !strings.Contains(ev.Denied.Reason, tt.reason)) {
				t.Fatalf("auth.denied %+v, want the worker's with %q", ev.Denied, tt.reason)
			}
			if ev.Type == audit.TypeKubeRequest && (ev.Kube.Status != tt.code || !strings.Contains(body, tt.reason) || ev.Groups != nil) {
				t.Fatalf("kube.request %+v groups %v, body %s; want status %d, no groups, a message with %q",
					ev.Kube, ev.Groups, body, tt.code, tt.reason)
			}
			if n := len(b.seen()); n != 0 {
				t.Fatalf("the API server saw %d requests", n)
			}
		})
	}
}

// TestImpersonatesTheAdmittedGroupsOnly: the API server sees the admitted
// identity and nothing of the client's, and the audit names the same groups.
func TestImpersonatesTheAdmittedGroupsOnly(t *testing.T) {
	b := newBench(t)
	b.h.Policy = keepGroups{"limen:view"}
	tok, sid := b.grant(nil)
	req := get(listPath)
	req.Header.Set("User-Agent", "kubectl/v1.35.0 "+strings.Repeat("x", 300)+"é")
	for k, v := range map[string]string{
		"Authorization": "Bearer stolen", "Impersonate-User": "admin", "Impersonate-Group": "system:masters",
		"impersonate-extra-scopes": "x", "X-Remote-User": "admin", "X-Limen-Session": "forged",
		"X-Forwarded-For": "10.9.9.9", "Forwarded": "for=10.9.9.9", "X-Real-Ip": "10.9.9.9", "X-Forwarded-Host": "evil",
	} {
		req.Header.Add(k, v)
	}
	ev, resp, body := b.serve(tok, req)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "ConfigMapList") {
		t.Fatalf("list: %d %s", resp.StatusCode, body)
	}
	reqs := b.seen()
	if len(reqs) != 1 {
		t.Fatalf("the API server saw %d requests", len(reqs))
	}
	h := reqs[0].header
	if h.Get("Impersonate-User") != "alice" || !slices.Equal(h.Values("Impersonate-Group"), []string{"limen:view"}) ||
		h.Get("Impersonate-Extra-Limen-Session") != sid || h.Get("Authorization") != "Bearer worker-sa-token" {
		t.Fatalf("the API server saw %v", h)
	}
	for k := range h {
		if l := strings.ToLower(k); strings.HasPrefix(l, "x-remote-") || strings.HasPrefix(l, "x-limen-") || l == "impersonate-extra-scopes" ||
			l == "forwarded" || l == "x-real-ip" || l == "x-forwarded-host" {
			t.Fatalf("the client's %s reached the API server", k)
		}
	}
	// The cluster's audit log names the client the proxy saw (the grant),
	// never an address the client claimed.
	if got := h.Values("X-Forwarded-For"); !slices.Equal(got, []string{"192.0.2.1"}) {
		t.Fatalf("X-Forwarded-For %q, want the grant's client address only", got)
	}
	if ev.Type != audit.TypeKubeRequest || !slices.Equal(ev.Groups, []string{"limen:view"}) || ev.Kube.Verb != "list" ||
		ev.Kube.Resource != "configmaps" || ev.Kube.Status != http.StatusOK || ev.SessionID != sid {
		t.Fatalf("kube.request %+v %+v", ev, ev.Kube)
	}
	if ev.KubeUser != "alice" || len(ev.Kube.UserAgent) != audit.MaxUserAgent || !strings.HasPrefix(ev.Kube.UserAgent, "kubectl/v1.35.0 xxx") {
		t.Fatalf("kube.request user %q, user agent %q: want alice and the client's agent cut to %d bytes", ev.KubeUser, ev.Kube.UserAgent, audit.MaxUserAgent)
	}
	if len(b.stored()) != 0 {
		t.Fatalf("a list opened a session: %v", b.stored())
	}
}

// TestImpersonatesTheMappedUser: the API server sees a user as the
// configured prefix and the name, a bot as the prefix, "bot:" and the name
// (never a user's name), and the session under the extra of the configured
// impersonation mode; the audit keeps the Limen principal.
func TestImpersonatesTheMappedUser(t *testing.T) {
	ci := identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindBot, Name: "alice"} // a bot named like a user
	tests := []struct {
		name   string
		c      impersonate.Config
		p      identity.Principal
		user   string
		header string
	}{
		{"user, default", impersonate.Config{}, alice, "alice", "Impersonate-Extra-Limen-Session"},
		{"bot, default", impersonate.Config{}, ci, "bot:alice", "Impersonate-Extra-Limen-Session"},
		{"user, prefix", impersonate.Config{UserPrefix: "limen:"}, alice, "limen:alice", "Impersonate-Extra-Limen-Session"},
		{"bot, prefix, constrained", impersonate.Config{UserPrefix: "limen:", Mode: impersonate.ModeConstrained}, ci,
			"limen:bot:alice", "Impersonate-Extra-Limenhq.github.io%2fsession"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBench(t)
			b.h.Impersonation = tt.c
			tok, sid := b.grant(func(g *grant.Grant) { g.Principal = tt.p })
			ev, resp, body := b.serve(tok, get(listPath))
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("list: %d %s", resp.StatusCode, body)
			}
			reqs := b.seen()
			if len(reqs) != 1 {
				t.Fatalf("the API server saw %d requests", len(reqs))
			}
			h := reqs[0].header
			if h.Get("Impersonate-User") != tt.user || len(h.Values("Impersonate-User")) != 1 || h.Get(tt.header) != sid {
				t.Fatalf("the API server saw %v, want user %q and %s: %s", h, tt.user, tt.header, sid)
			}
			if ev.Principal.Kind != tt.p.Kind || ev.Principal.Name != tt.p.Name {
				t.Fatalf("kube.request names %v, want the Limen principal %v", ev.Principal, tt.p)
			}
			if ev.KubeUser != tt.user {
				t.Fatalf("kube.request says the user impersonated was %q, the API server saw %q", ev.KubeUser, tt.user)
			}
		})
	}
}

// TestNothingStartsUnrecordedOrUnaudited: an exec goes to the API server
// only once its recording is open and its session.start stored; whatever
// fails first is a 503 (400 for an upgrade Limen does not relay) and the
// API server never sees the request.
func TestNothingStartsUnrecordedOrUnaudited(t *testing.T) {
	tests := []struct {
		name  string
		setup func(b *bench)
		path  string
		code  int
		msg   string
	}{
		{"no event channel", func(b *bench) { b.h.Events = nil }, execPath, http.StatusServiceUnavailable, "cannot audit sessions"},
		{"no spool", func(b *bench) { b.h.Spool = nil }, execPath, http.StatusServiceUnavailable, "no recording spool"},
		{"spool gone", func(b *bench) {
			if err := os.RemoveAll(b.spool); err != nil {
				b.t.Fatal(err)
			}
		}, execPath, http.StatusServiceUnavailable, "cannot record the session"},
		{"spool full", func(b *bench) {
			// A spool with less room than one minimal recording.
			full, err := recording.OpenSpoolLimit(b.spool, recording.MinMaxBytes-1)
			if err != nil {
				b.t.Fatal(err)
			}
			b.h.Spool = full
		}, execPath, http.StatusServiceUnavailable, "recording spool is full (its limit, recording-spool-max-bytes, is 65535 bytes), so Limen did not start the session"},
		{"audit store down", func(b *bench) {
			b.h.Events = func(context.Context, audit.Event) error { return audit.ErrUnavailable }
		}, execPath, http.StatusServiceUnavailable, "audit trail is unavailable"},
		{"an upgrade Limen does not relay", func(b *bench) {}, "/api/v1/namespaces/default/pods/p:8080/proxy/ws",
			http.StatusBadRequest, "only for pods/exec, pods/attach and pods/portforward"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBench(t)
			tt.setup(b)
			tok, _ := b.grant(nil)
			ev, resp, body := b.serve(tok, upgrade(tt.path))
			if resp.StatusCode != tt.code || !strings.Contains(body, tt.msg) {
				t.Fatalf("%d %s, want %d with %q", resp.StatusCode, body, tt.code, tt.msg)
			}
			if ev.Type != audit.TypeKubeRequest || ev.Kube.Status != tt.code || ev.Kube.Verb == "" {
				t.Fatalf("audit %s %+v, want kube.request %d with the classification", ev.Type, ev.Kube, tt.code)
			}
			if n := len(b.seen()); n != 0 {
				t.Fatalf("the API server saw %d requests", n)
			}
			for _, e := range b.stored() {
				t.Fatalf("a refused exec stored %s", e.Type)
			}
			if left, _ := filepath.Glob(filepath.Join(b.spool, "*")); len(left) != 0 {
				t.Fatalf("the spool keeps %v of a session that never started", left)
			}
		})
	}
}

// TestUpgradeTheAPIServerRefuses: the API server sees an exec only after its
// session.start is stored; when it answers without switching protocols
// (RBAC, no such pod), its answer is relayed, the kube.request keeps its
// status, the session ends not_started, and the recording is discarded.
func TestUpgradeTheAPIServerRefuses(t *testing.T) {
	b := newBench(t)
	b.h.Policy = keepGroups{"limen:view"}
	b.answer = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, `{"kind":"Status","code":403,"reason":"Forbidden"}`)
	}
	tok, sid := b.grant(nil)
	ev, resp, body := b.serve(tok, upgrade(execPath))
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, `"Forbidden"`) {
		t.Fatalf("%d %s, want the API server's 403", resp.StatusCode, body)
	}
	if ev.Kube.Status != http.StatusForbidden || ev.Kube.Subresource != "exec" || !slices.Equal(ev.Groups, []string{"limen:view"}) {
		t.Fatalf("kube.request %+v groups %v", ev.Kube, ev.Groups)
	}
	reqs := b.seen()
	if len(reqs) != 1 || len(reqs[0].stored) != 1 || reqs[0].stored[0].Type != audit.TypeSessionStart {
		t.Fatalf("the API server saw the exec with %d requests and %v stored; want it after session.start", len(reqs), reqs)
	}
	evs := b.stored()
	if len(evs) != 2 || evs[0].Type != audit.TypeSessionStart || evs[1].Type != audit.TypeSessionEnd {
		t.Fatalf("stored %v, want session.start and session.end", evs)
	}
	start, end := evs[0].Session, evs[1].Session
	if start.Login != "exec" || start.Pod != "p" || start.Container != "app" || !slices.Equal(start.Command, []string{"touch", "/tmp/mark"}) {
		t.Fatalf("session.start %+v", start)
	}
	if end.EndReason != audit.EndNotStarted || !strings.Contains(end.EndDetail, "403") || end.EndHop != audit.HopWorker ||
		end.RecordingSHA256 != "" || end.ExitCode != nil {
		t.Fatalf("session.end %+v, want not_started with the API server's 403 and no recording", end)
	}
	for _, e := range evs {
		if e.SessionID != sid || !slices.Equal(e.Groups, []string{"limen:view"}) {
			t.Fatalf("%s for session %s with groups %v", e.Type, e.SessionID, e.Groups)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(b.spool, "*")); len(left) != 0 {
		t.Fatalf("the spool keeps %v of a session that never started", left)
	}
}

// TestWatchStory: a watch is a session too. Its session.start is stored
// before the API server sees it, and its one session.end counts the bytes
// relayed and says it completed.
func TestWatchStory(t *testing.T) {
	b := newBench(t)
	const events = `{"type":"ADDED","object":{"kind":"ConfigMap"}}` + "\n"
	b.answer = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, events)
	}
	tok, sid := b.grant(nil)
	_, resp, body := b.serve(tok, get(listPath+"?watch=1"))
	if resp.StatusCode != http.StatusOK || body != events {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	if reqs := b.seen(); len(reqs) != 1 || len(reqs[0].stored) != 1 || reqs[0].stored[0].Type != audit.TypeSessionStart {
		t.Fatalf("the API server saw the watch with %v stored; want it after session.start", reqs)
	}
	var end *audit.Session
	for deadline := time.Now().Add(10 * time.Second); end == nil; time.Sleep(time.Millisecond) {
		for _, e := range b.stored() {
			if e.Type == audit.TypeSessionEnd && e.SessionID == sid {
				end = e.Session
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no session.end")
		}
	}
	if end.Login != "watch" || end.Target != "default/configmaps" || end.EndReason != audit.EndCompleted ||
		end.BytesOut != int64(len(events)) || end.BytesIn != 0 {
		t.Fatalf("session.end %+v, want a completed watch of default/configmaps with %d bytes out", end, len(events))
	}
	if n := len(b.stored()); n != 2 {
		t.Fatalf("%d session events, want one start and one end", n)
	}
}

// TestUnreachableAPIServer: a stream whose request cannot reach the API
// server is a 502 and ends upstream_reset.
func TestUnreachableAPIServer(t *testing.T) {
	b := newBench(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.h.Upstream.Host = ln.Addr().String()
	ln.Close() // nothing listens there now
	tok, _ := b.grant(nil)
	ev, resp, _ := b.serve(tok, get(listPath+"?watch=true"))
	if resp.StatusCode != http.StatusBadGateway || ev.Kube.Status != http.StatusBadGateway {
		t.Fatalf("%d, kube.request %+v; want 502", resp.StatusCode, ev.Kube)
	}
	evs := b.stored()
	if len(evs) != 2 || evs[1].Session.EndReason != audit.EndUpstreamReset || evs[1].Session.EndDetail == "" {
		t.Fatalf("stored %+v, want session.start and a session.end upstream_reset with the error", evs)
	}
}

// TestAPIServerRefusesTheWorkerToken: a 401 from the API server is about
// the worker's own ServiceAccount token (the user is impersonated, never
// authenticated there), so the user gets 503 naming the token, not 401,
// and the worker drops the token it read, taking a rotated file at once
// instead of at its next timed read (test/faults TestServiceAccountToken
// found a minute of 401s after a rotation that revoked the old token).
func TestAPIServerRefusesTheWorkerToken(t *testing.T) {
	b := newBench(t)
	b.answer = func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`)
	}
	var refused []string
	b.h.TokenRefused = func(tok string) { refused = append(refused, tok) }
	tok, _ := b.grant(nil)
	ev, resp, body := b.serve(tok, get(listPath))
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "ServiceAccount token") {
		t.Fatalf("%d %q; want 503 naming the worker's ServiceAccount token", resp.StatusCode, body)
	}
	if ev.Kube == nil || ev.Kube.Status != http.StatusServiceUnavailable {
		t.Fatalf("kube.request %+v, want status 503", ev.Kube)
	}
	if len(refused) != 1 || refused[0] != "worker-sa-token" {
		t.Fatalf("TokenRefused called with %q, want the token once", refused)
	}
}

// TestClockBehindRefusesCleanly: a worker whose clock is an hour behind
// refuses the grant as not yet valid, audited and answered; the header
// deadline is elapsed time, not the clock of the checks, so the stream is
// not cut before it is read (test/faults TestWorkerClockJumps found 502s
// "read audit event from worker: EOF" with a clock set back).
func TestClockBehindRefusesCleanly(t *testing.T) {
	b := newBench(t)
	b.h.Now = func() time.Time { return time.Now().Add(-time.Hour) }
	tok, _ := b.grant(nil)
	ev, resp, body := b.serve(tok, get(listPath))
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "not yet valid") || ev.Type != audit.TypeAuthDenied {
		t.Fatalf("%d %q, event %s; want 403 not yet valid, auth.denied", resp.StatusCode, body, ev.Type)
	}
}
