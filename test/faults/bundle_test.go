package faults

import (
	"context"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/policy/policytest"
	"github.com/limenhq/limen/test/gatewaytest"
)

// bundleServer is the policy bundle service of the scenario, which the
// test turns faulty: it answers every poll of the proxy and the worker
// with what its current fault says.
type bundleServer struct {
	srv  *httptest.Server
	mu   sync.Mutex
	body []byte // served with 200 unless fault says otherwise
	// fault: "" serves body; "500", "hang", or a bundle's bytes.
	fault string
	bad   []byte
	hung  chan struct{} // closed when the hang ends: releases the hanging polls
}

func (b *bundleServer) serve(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	fault, body, bad, hung := b.fault, b.body, b.bad, b.hung
	b.mu.Unlock()
	switch fault {
	case "500":
		http.Error(w, "the bundle service is down (test fault)", http.StatusInternalServerError)
		return
	case "hang":
		select { // until the client gives up, or the hang ends
		case <-r.Context().Done():
		case <-hung:
			http.Error(w, "the hang is over (test fault)", http.StatusServiceUnavailable)
		}
		return
	case "bad":
		body = bad
	}
	w.Header().Set("Content-Type", "application/gzip")
	_, _ = w.Write(body)
}

// set makes the server serve fault ("" for body, "500", "hang", "bad" for
// the bytes bad).
// the bytes bad); a hang ends with it, so that the next fault is polled
// at once rather than after the fetch timeout.
func (b *bundleServer) set(fault string, bad []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.endHang()
	b.fault, b.bad = fault, bad
}

func (b *bundleServer) setBody(body []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.endHang()
	b.body, b.fault = body, ""
}

func (b *bundleServer) endHang() {
	if b.fault == "hang" {
		close(b.hung)
		b.hung = make(chan struct{})
	}
}

// bundleData is the example policy data at revision rev: bobEdit binds
// bob to edit-demo as well (limen:edit: he may create config maps),
// aliceOff removes the dev trait's roles (alice gets no group: 403).
func bundleData(t *testing.T, bobEdit, aliceOff bool) map[string]any {
	data := policytest.ExampleData(t)
	bindings := policytest.Config(t, data)["bindings"].(map[string]any)
	if bobEdit {
		bindings["users"].(map[string]any)["bob"] = []any{"view-demo", "edit-demo"}
	}
	if aliceOff {
		delete(bindings["traits"].(map[string]any)["groups"].(map[string]any), "dev")
	}
	return data
}

// TestBundleServerFaults runs the load while the bundle service fails in
// turn with 500s, a hang past the fetch timeout, a corrupt bundle, an
// unsigned one and a signed bundle of an older revision. Each bad bundle,
// if it were activated, would refuse alice (no group) and let bob write:
// alice served throughout and bob refused prove that the last good bundle
// decided every request; the status of both processes names the failure.
// Then a good newer revision comes, and both take it (bob may now write).
// The short slice (go test ./...) runs the 500s only.
func TestBundleServerFaults(t *testing.T) {
	root := repoRoot(t)
	key, err := os.ReadFile(filepath.Join(root, "bundles", "testkeys", "TEST-ONLY-signing-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	good := policytest.SignedBundle(t, "2", bundleData(t, false, false), key)
	bs := &bundleServer{body: good, hung: make(chan struct{})}
	bs.srv = httptest.NewTLSServer(http.HandlerFunc(bs.serve))
	t.Cleanup(func() { bs.set("", nil); bs.srv.Close() })
	dir := t.TempDir()
	caFile := filepath.Join(dir, "bundle-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: bs.srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--policy-bundle-url", bs.srv.URL + "/bundle.tar.gz", "--policy-bundle-ca", caFile,
		"--policy-public-key", filepath.Join(root, "bundles", "testkeys", "TEST-ONLY-verification-key.pem"),
		"--policy-min-delay", "1s", "--policy-max-delay", "2s"}
	s := &setup{opts: gatewaytest.Options{ProxyArgs: flags, WorkerArgs: flags}}
	env := startGateway(t, s)
	ctx := context.Background()
	kc, err := env.Login(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	bobKC, err := env.Login(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	l := startLoad(t, env, kc)
	bob := bobClient(t, bobKC)
	persist := []string{filepath.Join(env.ProxyDataDir(), "policy"), filepath.Join(env.WorkerDataDir(), "policy")}
	waitRevision(t, persist, "2", 30*time.Second)
	if err := bob.write(l.ns); !apierrors.IsForbidden(err) {
		t.Fatalf("bob's write under revision 2 (view only): %v, want the API server's 403", err)
	}

	phases := []struct {
		name  string
		fault string
		bad   []byte
		for_  time.Duration
		says  string // in each process's policy status LastError
	}{
		{"500s", "500", nil, span(20*time.Second, 25*time.Second), "500"},
		{"a hang past the 30s fetch timeout", "hang", nil, 35 * time.Second, "Client.Timeout"},
		{"a corrupt bundle", "bad", []byte("\x1f\x8b\x08\x00 this is no bundle"), 12 * time.Second, ""},
		{"an unsigned bundle", "bad", policytest.Bundle(t, "5", bundleData(t, true, true)), 12 * time.Second, ""},
		{"a rolled-back revision", "bad", policytest.SignedBundle(t, "1", bundleData(t, true, true), key), 12 * time.Second, ""},
	}
	if !full() {
		phases = phases[:1]
	}
	faultStart := time.Now()
	var saw, reasons []string
	for _, p := range phases {
		start := time.Now()
		bs.set(p.fault, p.bad)
		deadline := start.Add(p.for_)
		for time.Now().Before(deadline) {
			if err := bob.write(l.ns); !apierrors.IsForbidden(err) {
				t.Fatalf("during %s bob's write got %v, want 403: a bundle other than revision 2 decided it", p.name, err)
			}
			time.Sleep(time.Second)
		}
		served, refused := l.served(start, time.Now())
		if refused > 0 {
			t.Errorf("during %s: %d of alice's GETs refused (%v): the last good bundle must keep deciding", p.name, refused, l.refusals(start))
		}
		for _, dir := range persist {
			st, err := policy.ReadStatus(dir)
			if err != nil {
				t.Fatal(err)
			}
			if st.Revision != "2" || st.LastErrorAt.Before(start) || !strings.Contains(st.LastError, p.says) {
				t.Errorf("during %s the policy status in %s says revision %q, last error %q at %s; want revision 2 and this phase's failure (%q)",
					p.name, dir, st.Revision, st.LastError, st.LastErrorAt.Format(time.RFC3339), p.says)
			}
			if len(st.Refusals) > 0 && dir == persist[0] {
				reasons = append(reasons, fmt.Sprintf("%s: %s ×%d", p.name, st.Refusals[0].Reason, st.Refusals[0].Count))
			}
		}
		saw = append(saw, fmt.Sprintf("%s for %s: %d GETs served, %d refused", p.name, p.for_, served, refused))
	}
	bs.setBody(policytest.SignedBundle(t, "3", bundleData(t, true, false), key))
	fixed := time.Now()
	took := waitRevision(t, persist, "3", 30*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for err := bob.write(l.ns); err != nil; err = bob.write(l.ns) {
		if time.Now().After(deadline) {
			t.Fatalf("revision 3 is active, but bob's write still fails: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	v := checkInvariants(t, l, invariantsOpts{user: "alice", proxyDir: env.ProxyDataDir()})
	report(t, figures{scenario: "bundle-server", saw: strings.Join(saw, "; ") + "; the policy stayed revision 2 throughout (" + time.Since(faultStart).Round(time.Second).String() + ")",
		recovered: -1, v: v, extra: fmt.Sprintf("; good revision 3 active on proxy and worker %s after it was served", took.Round(100*time.Millisecond)) +
			fmt.Sprintf(" (%s); the proxy's policy status named each: %s", time.Since(fixed).Round(100*time.Millisecond), strings.Join(reasons, ", "))})
}

// waitRevision waits until the policy status in every dir names revision
// rev active, and returns how long that took.
func waitRevision(t *testing.T, dirs []string, rev string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		var last []string
		ok := true
		for _, dir := range dirs {
			st, err := policy.ReadStatus(dir)
			if err != nil || st.Revision != rev {
				ok = false
				last = append(last, fmt.Sprintf("%s: revision %q, last error %q, err %v", dir, st.Revision, st.LastError, err))
			}
		}
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("policy revision %s not active within %s: %s", rev, within, strings.Join(last, "; "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// writer creates config maps as a user whose rights the policy decides.
type writer struct{ client *kubernetes.Clientset }

func bobClient(t *testing.T, kc string) writer {
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst, cfg.Timeout = -1, 0, 10*time.Second
	cfg.WarningHandler = rest.NoWarnings{}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return writer{c}
}

// write creates a config map of a fresh name in ns.
func (w writer) write(ns string) error {
	_, err := w.client.CoreV1().ConfigMaps(ns).Create(context.Background(),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "bob-"}}, metav1.CreateOptions{})
	return err
}
