package proxy_test

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/proxy"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/worker"
)

// deadline bounds every wait: a failure, never a measurement.
const deadline = 10 * time.Second

// hop is one side's lock set and session registry.
type hop struct {
	locks *locks.Set
	reg   *sessions.Registry
}

func newHop(t *testing.T) hop {
	set := locks.NewSet()
	reg := sessions.New(sessions.Config{Locks: set, Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(reg.Close)
	return hop{set, reg}
}

// lock locks alice on this hop only.
func (h hop) lock() {
	h.locks.Apply(locks.Change{Op: locks.OpSet, Lock: locks.Lock{
		Target: locks.TargetOf(alice), Reason: "incident 42", CreatedBy: "user:admin", CreatedAt: time.Now(),
	}})
}

var alice = identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "alice", Traits: map[string][]string{"groups": {"dev"}}}

// path is a proxy and a worker joined by a pipe, in front of upstream.
type path struct {
	proxy, worker hop
	kube          *proxy.Kube
	handler       *worker.Handler
	store         *audit.Store
	url           string
}

// newPath builds the request path. The API server is a stand-in (named as
// such): it answers every request with a body that never ends, which the
// real API server does only for the kinds of request Limen lists as
// sessions, so that this test can show that an ordinary response is under
// the watchdog too. upstreamGone receives the path of each request whose
// context the stand-in saw end.
func newPath(t *testing.T) (*path, <-chan string) {
	t.Helper()
	gone := make(chan string, 16)
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		gone <- r.URL.Path
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
	ctx := context.Background()
	pol, err := policy.New(ctx, policy.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pol.Close() })
	store, err := audit.Open(ctx, filepath.Join(t.TempDir(), audit.FileName), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	demo := policy.Cluster{Name: "demo", Labels: map[string]string{"env": "dev"}}
	p := &path{proxy: newHop(t), worker: newHop(t), store: store}
	w := &worker.Handler{
		Cluster: demo, GrantKey: pub, Policy: pol, Upstream: upstream, Transport: rt,
		Token: func() (string, error) { return "stand-in-token", nil },
		Locks: p.worker.locks, Sessions: p.worker.reg,
		Logger: slog.New(slog.DiscardHandler), Now: time.Now,
	}
	p.kube = &proxy.Kube{
		Authenticate: func(*http.Request) (identity.Principal, time.Time, error) {
			return alice, time.Now().Add(time.Hour), nil
		},
		Policy: pol, Tunnel: pipe{w}, Audit: store, GrantKey: priv,
		Locks: p.proxy.locks, Sessions: p.proxy.reg,
		Clusters: func(string) policy.Cluster { return demo },
		Logger:   slog.New(slog.DiscardHandler), Now: time.Now,
	}
	p.handler = w
	// Session events reach the proxy's store as the control stream brings
	// them.
	w.Events = func(ctx context.Context, ev audit.Event) error { return p.kube.SessionEvent(ctx, demo.Name, ev) }
	srv := httptest.NewServer(p.kube)
	t.Cleanup(srv.Close)
	p.url = srv.URL
	return p, gone
}

type pipe struct{ w *worker.Handler }

func (o pipe) Open(context.Context, string) (net.Conn, error) {
	client, server := net.Pipe()
	go o.w.ServeStream(context.Background(), server)
	return client, nil
}

// open GETs target through the proxy, reads the first line and returns a
// channel that receives when the body ends.
func (p *path) open(t *testing.T, target string) <-chan struct{} {
	t.Helper()
	_, ended := p.openResp(t, target)
	return ended
}

// openResp is open that also returns the response, whose body the caller
// may close to hang up.
func (p *path) openResp(t *testing.T, target string) (*http.Response, <-chan struct{}) {
	t.Helper()
	resp, err := http.Get(p.url + target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); resp.StatusCode != http.StatusOK || line != "first\n" {
		t.Fatalf("GET %s: %s %q %v", target, resp.Status, line, err)
	}
	ended := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, br)
		close(ended)
	}()
	return resp, ended
}

func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(deadline):
		t.Fatalf("%s: not within %s", what, deadline)
		var zero T
		return zero
	}
}

// live returns the kinds of the live sessions a registry lists.
func live(reg *sessions.Registry) []sessions.Kind {
	var kinds []sessions.Kind
	for _, i := range reg.List() {
		if i.Live() {
			kinds = append(kinds, i.Kind)
		}
	}
	return kinds
}

// TestEveryResponseEndsOnALockAtEitherHop locks alice at one hop only while
// a response of each kind is open: the response ends, and the API server's
// side of it is closed, whether or not the request is a stream.
func TestEveryResponseEndsOnALockAtEitherHop(t *testing.T) {
	const base = "/k8s/demo/api/v1/namespaces/default"
	tests := []struct {
		name, target string
		kind         sessions.Kind
	}{
		{"ordinary get", base + "/configmaps/c", sessions.KindNone},
		{"log follow=TRUE", base + "/pods/p/log?follow=TRUE", sessions.KindLogs},
		{"log %66ollow=t", base + "/pods/p/log?%66ollow=t&container=app", sessions.KindLogs},
		{"log follow=false", base + "/pods/p/log?follow=false", sessions.KindNone},
		{"watch=yes", base + "/configmaps?watch=yes", sessions.KindWatch},
		{"pods proxy", base + "/pods/p:8080/proxy/events", sessions.KindProxy},
		{"services proxy", base + "/services/web:http/proxy/events", sessions.KindProxy},
		{"nodes proxy", "/k8s/demo/api/v1/nodes/n1/proxy/logs", sessions.KindProxy},
	}
	for _, tt := range tests {
		for _, at := range []string{"proxy", "worker"} {
			t.Run(tt.name+" locked at the "+at, func(t *testing.T) {
				p, gone := newPath(t)
				ended := p.open(t, tt.target)
				for h, reg := range map[string]*sessions.Registry{"proxy": p.proxy.reg, "worker": p.worker.reg} {
					got := live(reg)
					if tt.kind == sessions.KindNone && len(got) != 0 || tt.kind != sessions.KindNone && (len(got) != 1 || got[0] != tt.kind) {
						t.Fatalf("%s lists %v live, want %q", h, got, tt.kind)
					}
				}
				hop := p.proxy
				if at == "worker" {
					hop = p.worker
				}
				hop.lock()
				waitFor(t, ended, "the response ends after the lock")
				waitFor(t, gone, "the API server's side closes after the lock")
			})
		}
	}
}

func TestEveryResponseEndsWhenItsGrantExpires(t *testing.T) {
	p, gone := newPath(t)
	p.kube.GrantTTL = time.Second
	ended := p.open(t, "/k8s/demo/api/v1/namespaces/default/configmaps/c")
	waitFor(t, ended, "an ordinary response ends when its grant expires")
	waitFor(t, gone, "the API server's side closes when the grant expires")
}

// TestKillAtEitherHopEndsAStream kills a followed log, spelled as kubectl
// never spells it, by its session ID at one hop.
func TestKillAtEitherHopEndsAStream(t *testing.T) {
	for _, at := range []string{"proxy", "worker"} {
		t.Run(at, func(t *testing.T) {
			p, gone := newPath(t)
			ended := p.open(t, "/k8s/demo/api/v1/namespaces/default/pods/p/log?follow=True")
			reg := p.proxy.reg
			if at == "worker" {
				reg = p.worker.reg
			}
			list := reg.List()
			if len(list) != 1 || !list[0].Live() || list[0].Kind != sessions.KindLogs || list[0].Target != "default/p/" {
				t.Fatalf("%s lists %+v, want one live log of default/p", at, list)
			}
			if !reg.Kill(list[0].ID) {
				t.Fatal("Kill did not find the session")
			}
			waitFor(t, ended, fmt.Sprintf("the log ends after a kill at the %s", at))
			waitFor(t, gone, "the API server's side closes after the kill")
			if i, _ := reg.Get(list[0].ID); i.Reason != sessions.ReasonKilled {
				t.Fatalf("ended %+v, want killed", i)
			}
		})
	}
}
