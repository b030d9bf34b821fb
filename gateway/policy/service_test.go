package policy

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/ca"
)

// bundleServer is a real https bundle service with its own test CA (a
// fresh gateway/ca root per server): it serves whatever bundle was set
// last, with an ETag, answering 304 to a matching If-None-Match.
type bundleServer struct {
	*httptest.Server
	ca       *ca.Authority
	mu       sync.Mutex
	body     []byte
	etag     string
	status   int
	redirect string
	requests atomic.Int32
	notMod   atomic.Int32
}

func newBundleServer(t *testing.T) *bundleServer {
	authority, err := ca.Open(ca.Options{DataDir: t.TempDir(), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	s := &bundleServer{status: http.StatusOK, ca: authority}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		s.mu.Lock()
		body, etag, status, redirect := s.body, s.etag, s.status, s.redirect
		s.mu.Unlock()
		if redirect != "" {
			http.Redirect(w, r, redirect, http.StatusFound)
			return
		}
		if status != http.StatusOK {
			http.Error(w, "broken on purpose", status)
			return
		}
		if etag != "" && r.Header.Get("If-None-Match") == etag {
			s.notMod.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("ETag", etag)
		w.Write(body)
	}))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{authority.ServingCertificate()}}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

// caPEM is the CA that policy-bundle-ca must name to trust this server.
func (s *bundleServer) caPEM() []byte { return s.ca.RootPEM() }

func (s *bundleServer) serve(body []byte, etag string) {
	s.mu.Lock()
	s.body, s.etag, s.status, s.redirect = body, etag, http.StatusOK, ""
	s.mu.Unlock()
}

// redirectTo answers every request with a redirect to url.
func (s *bundleServer) redirectTo(url string) {
	s.mu.Lock()
	s.redirect = url
	s.mu.Unlock()
}

func (s *bundleServer) fail(status int) {
	s.mu.Lock()
	s.status = status
	s.mu.Unlock()
}

// bobData grants bob the given group on the demo cluster.
func bobData(group string) map[string]any {
	return exampleData(
		map[string]any{"r": role([]any{group}, map[string]any{"name": "demo"})},
		map[string]any{"bob": []any{"r"}},
	)
}

func serviceEngine(t *testing.T, srv *bundleServer, persist string) *Engine {
	t.Helper()
	_, pub := testKeys(t)
	e, err := New(context.Background(), Options{BundleURL: srv.URL, BundleCAPEM: srv.caPEM(), PublicKeyPEM: pub, PersistDir: persist, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func wantGroups(t *testing.T, e *Engine, want ...string) {
	t.Helper()
	d, err := e.Groups(context.Background(), bob, demo)
	if err != nil {
		t.Fatalf("Groups: %v", err)
	}
	if !slices.Equal(d.Groups, want) {
		t.Fatalf("Groups = %q (revision %s), want %q", d.Groups, d.Revision, want)
	}
}

func otherKey(t *testing.T) []byte {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
}

func TestServiceChangingBundleAndETag(t *testing.T) {
	priv, _ := testKeys(t)
	srv := newBundleServer(t)
	e := serviceEngine(t, srv, "")
	ctx := context.Background()

	if _, err := e.Groups(ctx, bob, demo); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("before the first bundle: err = %v, want ErrUnavailable", err)
	}
	srv.serve(buildBundle(t, "1", defaultRego(t), bobData("limen:view"), priv), `"e1"`)
	if err := e.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	wantGroups(t, e, "limen:view")
	if err := e.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if srv.notMod.Load() != 1 {
		t.Fatalf("second fetch did not send the ETag (304s: %d)", srv.notMod.Load())
	}
	srv.serve(buildBundle(t, "2", defaultRego(t), bobData("limen:edit"), priv), `"e2"`)
	if err := e.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	wantGroups(t, e, "limen:edit")
	st := e.Status()
	if st.Revision != "2" || st.LastError != "" || st.LastFetch.IsZero() || st.Source != SourceService {
		t.Fatalf("status = %+v", st)
	}
}

// TestServiceRefusesBadBundles serves one good bundle, then each bad one:
// every bad bundle is refused with a reason and the good one keeps answering.
func TestServiceRefusesBadBundles(t *testing.T) {
	priv, _ := testKeys(t)
	rego := defaultRego(t)
	good := buildBundle(t, "10", rego, bobData("limen:view"), priv)
	evilRego := withFile(rego, "evil.rego", "package limen.kube\n\ngroups contains \"system:masters\" if input.principal.name == \"bob\"\n")
	noValidate := withFile(rego, "validate.rego", "package limen.other\n")
	// Every bad bundle is newer than the good one: what refuses it is its
	// own fault, never the order.
	const bad = "11"
	tests := []struct {
		name   string
		body   []byte
		want   string
		reason string
	}{
		{"signed with another key", buildBundle(t, bad, rego, bobData("limen:edit"), otherKey(t)), "verification", ReasonSignature},
		{"unsigned", buildBundle(t, bad, rego, bobData("limen:edit"), nil), "missing .signatures.json", ReasonSignature},
		{"revision edited after signing", withManifest(t, buildBundle(t, bad, rego, bobData("limen:edit"), priv), `{"revision":"99","roots":[""]}`), "read bundle", ReasonSignature},
		{"no revision", buildBundle(t, "", rego, bobData("limen:edit"), priv), "has no revision", ReasonBadRevision},
		{"revision not a number", buildBundle(t, "v1.2.3", rego, bobData("limen:edit"), priv), "not an unsigned decimal integer", ReasonBadRevision},
		{"revision with a leading zero", buildBundle(t, "011", rego, bobData("limen:edit"), priv), "leading zero", ReasonBadRevision},
		{"revision beyond 64 bits", buildBundle(t, "18446744073709551616", rego, bobData("limen:edit"), priv), "64 bits", ReasonBadRevision},
		{"corrupt", []byte("\x1f\x8b\x08\x00garbage that is not a tarball"), "read bundle", ReasonInvalid},
		{"truncated", good[:len(good)/2], "read bundle", ReasonInvalid},
		{"empty", []byte{}, "read bundle", ReasonInvalid},
		{"system:masters in data", buildBundle(t, bad, rego, bobData("system:masters"), priv), `grants group system:masters`, ReasonInvalid},
		{"system:masters by rule", buildBundle(t, bad, evilRego, bobData("limen:edit"), priv), `would grant ["system:masters"]`, ReasonInvalid},
		{"malformed group", buildBundle(t, bad, rego, bobData("limen edit"), priv), "not a well-formed group name", ReasonInvalid},
		{"does not compile", buildBundle(t, bad, withFile(rego, "broken.rego", "package limen.kube\n\nx := y\n"), bobData("limen:edit"), priv), "does not compile", ReasonInvalid},
		{"no validation", buildBundle(t, bad, noValidate, bobData("limen:edit"), priv), "data.limen.validate.errors", ReasonInvalid},
		{"unknown role", buildBundle(t, bad, rego, exampleData(map[string]any{}, map[string]any{"bob": []any{"ghost"}}), priv), `unknown role "ghost"`, ReasonInvalid},
	}
	srv := newBundleServer(t)
	e := serviceEngine(t, srv, "")
	srv.serve(good, `"good"`)
	if err := e.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv.serve(tt.body, fmt.Sprintf(`"bad-%d"`, i))
			err := e.Refresh(context.Background())
			if !errors.Is(err, ErrBundleRefused) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Refresh = %v, want ErrBundleRefused mentioning %q", err, tt.want)
			}
			st := e.Status()
			if st.Revision != "10" || !strings.Contains(st.LastError, tt.want) || st.Refused != i+1 {
				t.Fatalf("status = %+v", st)
			}
			if r := st.Refusals[0]; r.Reason != tt.reason || r.Active != "10" || r.Count != 1 || r.At.IsZero() {
				t.Fatalf("latest refusal = %+v, want reason %s with active revision 10", r, tt.reason)
			}
			// A revision read past a failed signature is reported as a claim.
			if r := st.Refusals[0]; r.Unverified != (tt.reason == ReasonSignature) || (r.Unverified && r.Revision != map[bool]string{true: "99", false: bad}[strings.Contains(tt.name, "edited")]) {
				t.Fatalf("latest refusal = %+v: a signature refusal reports the claimed revision as unverified, others never", r)
			}
			wantGroups(t, e, "limen:view")
		})
	}
}

func withFile(m map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range m {
		if a != k {
			out[a] = b
		}
	}
	return out
}

func TestServiceErrorsKeepActiveBundle(t *testing.T) {
	priv, _ := testKeys(t)
	srv := newBundleServer(t)
	e := serviceEngine(t, srv, "")
	srv.serve(buildBundle(t, "1", defaultRego(t), bobData("limen:view"), priv), `"g"`)
	if err := e.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.fail(http.StatusInternalServerError)
	if err := e.Refresh(context.Background()); err == nil || !strings.Contains(err.Error(), "500") {
		t.Fatalf("Refresh = %v, want the 500", err)
	}
	srv.Close()
	if err := e.Refresh(context.Background()); err == nil {
		t.Fatal("Refresh with the server gone succeeded")
	}
	wantGroups(t, e, "limen:view")
	if st := e.Status(); st.LastError == "" || st.Refused != 0 {
		t.Fatalf("status = %+v: want a fetch error, no refusal", st)
	}
}

func TestServerDownAtStartUsesPersistedBundle(t *testing.T) {
	priv, _ := testKeys(t)
	dir := t.TempDir()
	srv := newBundleServer(t)
	first := serviceEngine(t, srv, dir)
	srv.serve(buildBundle(t, "7", defaultRego(t), bobData("limen:view"), priv), `"p"`)
	if err := first.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	first.Close()
	srv.Close()

	second := serviceEngine(t, srv, dir)
	wantGroups(t, second, "limen:view")
	if err := second.Refresh(context.Background()); err == nil {
		t.Fatal("Refresh against a closed server succeeded")
	}
	wantGroups(t, second, "limen:view")
	if st := second.Status(); st.Revision != "7" || st.LastError == "" {
		t.Fatalf("status = %+v", st)
	}
	saved, err := ReadStatus(dir)
	if err != nil || saved.Revision != "7" || saved.LastError == "" {
		t.Fatalf("saved status = %+v, %v", saved, err)
	}
}

func TestTamperedPersistedBundleIsNotUsed(t *testing.T) {
	priv, _ := testKeys(t)
	dir := t.TempDir()
	raw := buildBundle(t, "3", defaultRego(t), bobData("limen:view"), otherKey(t))
	if err := os.WriteFile(filepath.Join(dir, bundleFile), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	e := serviceEngine(t, newBundleServer(t), dir)
	if _, err := e.Groups(context.Background(), bob, demo); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Groups = %v, want ErrUnavailable", err)
	}
	if st := e.Status(); st.Revision != "" || st.Refused != 1 || st.Refusals[0].Reason != ReasonSignature {
		t.Fatalf("status = %+v", st)
	}
	// A forged file sets no floor: the service's real revision 1 is not a
	// rollback against the forger's 3.
	srv := newBundleServer(t)
	e2 := serviceEngine(t, srv, dir)
	srv.serve(buildBundle(t, "1", defaultRego(t), bobData("limen:edit"), priv), `"1"`)
	if err := e2.Refresh(context.Background()); err != nil {
		t.Fatalf("Refresh after a forged persisted bundle: %v", err)
	}
	wantGroups(t, e2, "limen:edit")
}

func TestRunPollsAndCloseStops(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for two poll intervals")
	}
	priv, pub := testKeys(t)
	srv := newBundleServer(t)
	srv.serve(buildBundle(t, "1", defaultRego(t), bobData("limen:view"), priv), `"1"`)
	e, err := New(context.Background(), Options{BundleURL: srv.URL, BundleCAPEM: srv.caPEM(), PublicKeyPEM: pub, MinDelay: time.Second, MaxDelay: time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(context.Background()) }()
	waitRevision(t, e, "1")
	srv.serve(buildBundle(t, "2", defaultRego(t), bobData("limen:edit"), priv), `"2"`)
	waitRevision(t, e, "2")
	e.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after Close")
	}
}

func waitRevision(t *testing.T, e *Engine, rev string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for e.Status().Revision != rev {
		if time.Now().After(deadline) {
			t.Fatalf("revision %q never became active: %+v", rev, e.Status())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEvaluateWhileSwapping runs decisions in several goroutines while
// bundles swap underneath. Run it with -race. Every decision must be the
// one its own revision makes: never a mix, never an error.
func TestEvaluateWhileSwapping(t *testing.T) {
	priv, _ := testKeys(t)
	// Revisions move forward; odd ones grant limen:edit, even ones limen:view.
	const swaps = 20
	group := func(rev string) string {
		n, _ := strconv.Atoi(rev)
		return []string{"limen:view", "limen:edit"}[n%2]
	}
	bundles := make([][]byte, swaps+1)
	for i := range bundles {
		rev := strconv.Itoa(i)
		bundles[i] = buildBundle(t, rev, defaultRego(t), bobData(group(rev)), priv)
	}
	srv := newBundleServer(t)
	e := serviceEngine(t, srv, t.TempDir())
	srv.serve(bundles[0], `"0"`)
	if err := e.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var decisions atomic.Int64
	errs := make(chan error, 8)
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				d, err := e.Groups(ctx, bob, demo)
				allowed, rev, err2 := e.AllowGroups(ctx, bob, demo, []string{"limen:view", "limen:edit"})
				if err = errors.Join(err, err2); err != nil {
					errs <- err
					return
				}
				if !slices.Equal(d.Groups, []string{group(d.Revision)}) || !slices.Equal(allowed, []string{group(rev)}) {
					errs <- fmt.Errorf("revision %s decided %q; revision %s allowed %q", d.Revision, d.Groups, rev, allowed)
					return
				}
				decisions.Add(1)
			}
		})
	}
	for i := 1; i <= swaps; i++ {
		srv.serve(bundles[i], fmt.Sprintf(`"%d"`, i))
		if err := e.Refresh(context.Background()); err != nil {
			t.Error(err)
		}
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if decisions.Load() == 0 {
		t.Fatal("no decision was made while swapping")
	}
	if st := e.Status(); st.Revision != strconv.Itoa(swaps) {
		t.Fatalf("active revision %s after the last swap, want %d", st.Revision, swaps)
	}
}
