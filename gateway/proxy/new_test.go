package proxy_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/enroll"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/proxy"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/worker"
)

// assembled is a proxy and a worker built by their New from the same
// configuration cmd/limen gives them, joined by the real tunnel over
// loopback TLS after a real enrollment. No API server is needed: the
// control stream is tested, not the request path.
type assembled struct {
	proxy  *proxy.Server
	worker *worker.Server
	// addr is the proxy's port; proxyDir and workerDir their data
	// directories.
	addr, proxyDir, workerDir string
}

const testCluster = "demo"

// startAssembled starts the proxy, sets the locks in force before any worker
// connects (before, if set, runs then), enrolls and starts a worker, and
// returns once the proxy counts the worker as connected — which it does
// only after the worker acknowledged the lock list.
func startAssembled(t *testing.T, before func(p *proxy.Server)) *assembled {
	t.Helper()
	return startAssembledWith(t, before, nil)
}

// startAssembledWith is startAssembled, running beforeWorker, if set, with
// the worker's enrolled data directory before the worker is built.
func startAssembledWith(t *testing.T, before func(p *proxy.Server), beforeWorker func(dataDir string)) *assembled {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	p, err := proxy.New(ctx, proxy.Config{DataDir: filepath.Join(dir, "proxy"), Clusters: []string{testCluster}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if before != nil {
		before(p)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { _ = p.Serve(ctx, ln) })

	tok, _, err := p.Tokens.Create(ctx, testCluster, 10*time.Minute, p.CA.Fingerprint(), identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	wdir := filepath.Join(dir, "worker")
	id, err := enroll.Enroll(ctx, enroll.Options{Proxy: ln.Addr().String(), Cluster: testCluster, Token: tok.String(), DataDir: wdir})
	if err != nil {
		t.Fatal(err)
	}
	if beforeWorker != nil {
		beforeWorker(wdir)
	}
	// The worker needs an API server address and CA to build its
	// transports; nothing here sends it a request.
	caFile := filepath.Join(dir, "kube-ca.pem")
	if err := os.WriteFile(caFile, p.CA.RootPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(ctx, worker.Config{Identity: id, DataDir: wdir, APIServer: "https://127.0.0.1:1",
		CAFile: caFile, TokenFile: filepath.Join(dir, "no-token"), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	wg.Go(func() { _ = w.Run(ctx) })
	waitUntil(t, "the worker to connect", func() bool { return p.Tunnel.Connected(testCluster) })
	return &assembled{proxy: p, worker: w, addr: ln.Addr().String(), proxyDir: filepath.Join(dir, "proxy"), workerDir: wdir}
}

// waitUntil waits for an observable state, with a deadline.
func waitUntil(t testing.TB, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func sessionStart(cluster string) audit.Event {
	return audit.Event{Type: audit.TypeSessionStart, Time: time.Now(), Principal: alice, Cluster: cluster,
		SessionID: "s-" + cluster, Session: &audit.Session{Kind: "kube", Login: "exec", Namespace: "a", Pod: "p"}}
}

func (a *assembled) stored(t *testing.T) []audit.Event {
	t.Helper()
	evs, err := a.proxy.Audit.Search(context.Background(), audit.Query{Type: audit.TypeSessionStart})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestAssembledEventRelay: the worker's session events reach the proxy's
// audit store over the control stream and count as delivered only once
// stored; a worker reports only for its own cluster and only session events.
func TestAssembledEventRelay(t *testing.T) {
	a := startAssembled(t, nil)
	ctx := context.Background()
	// The session the proxy relays, as Kube.ServeHTTP registers it.
	live, err := a.proxy.Sessions.Track(ctx, sessions.Session{ID: "s-" + testCluster, Principal: alice, Cluster: testCluster,
		Kind: sessions.KindExec, Expires: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	defer live.End(sessions.ReasonCompleted)
	if err := a.worker.Handler.Events(ctx, sessionStart(testCluster)); err != nil {
		t.Fatalf("own cluster's session.start: %v", err)
	}
	evs := a.stored(t)
	if len(evs) != 1 || evs[0].Cluster != testCluster || evs[0].SessionID != "s-"+testCluster {
		t.Fatalf("stored %+v, want the one session.start", evs)
	}

	err = a.worker.Handler.Events(ctx, sessionStart("prod"))
	if err == nil || !strings.Contains(err.Error(), `may not report for cluster "prod"`) {
		t.Fatalf("another cluster's event: err %v, want a refusal naming the cluster", err)
	}
	kube := audit.Event{Type: audit.TypeKubeRequest, Time: time.Now(), Principal: alice, Cluster: testCluster,
		Kube: &audit.KubeRequest{Verb: "get", Resource: "pods", Method: "GET", Path: "/api/v1/pods", Status: 200}}
	if err := a.worker.Handler.Events(ctx, kube); err == nil || !strings.Contains(err.Error(), "may not be sent on the control stream") {
		t.Fatalf("kube.request on the control stream: err %v, want a refusal", err)
	}
	if evs := a.stored(t); len(evs) != 1 {
		t.Fatalf("refused events were stored: %+v", evs)
	}
}

// TestAssembledLockPush: a worker holds the proxy's locks from the moment it
// serves (the list pushed on connect), and a kill pushed to its cluster
// ends its session there.
func TestAssembledLockPush(t *testing.T) {
	a := startAssembled(t, func(p *proxy.Server) {
		l := locks.Lock{Target: locks.TargetOf(alice), Reason: "incident 7", CreatedBy: "user:admin", CreatedAt: time.Now()}
		if err := p.Locks.Add(context.Background(), l); err != nil {
			t.Fatal(err)
		}
	})
	err := a.worker.Handler.Locks.Check(alice, time.Now())
	if err == nil || !strings.Contains(err.Error(), "incident 7") {
		t.Fatalf("worker's lock check for alice: %v, want the lock pushed on connect", err)
	}
	if err := a.worker.Handler.Locks.Check(identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "bob"}, time.Now()); err != nil {
		t.Fatalf("bob is not locked: %v", err)
	}

	live, err := a.worker.Sessions.Track(context.Background(), sessions.Session{ID: "s-kill", Principal: identity.Principal{ClientID: identity.ClientKubectl, Kind: identity.KindUser, Name: "bob"},
		Cluster: testCluster, Kind: sessions.KindExec, Expires: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := sessions.KillMessage("s-kill", "user:admin")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.proxy.Tunnel.Broadcast(context.Background(), testCluster, m); err != nil {
		t.Fatal(err)
	}
	select {
	case <-live.Context().Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the kill pushed to the worker did not end its session")
	}
}
