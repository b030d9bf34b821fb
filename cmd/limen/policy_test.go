package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"

	"github.com/limenhq/limen/bundles"
	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/policies"
)

func runPolicyCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append([]string{"policy"}, args...))
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

const testPublicKey = "../../bundles/testkeys/TEST-ONLY-verification-key.pem"

// exampleBundle builds the default policy and example data into a bundle
// signed with the committed TEST key, as `make bundle` does.
func exampleBundle(t *testing.T, revision string, signed bool) []byte {
	t.Helper()
	var data map[string]any
	if err := json.Unmarshal(bundles.ExampleData(), &data); err != nil {
		t.Fatal(err)
	}
	b := bundle.Bundle{Data: data, Manifest: bundle.Manifest{Revision: revision}}
	names, _ := fs.Glob(policies.FS(), "*.rego")
	for _, name := range names {
		src, _ := fs.ReadFile(policies.FS(), name)
		m, err := ast.ParseModuleWithOpts(name, string(src), ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			t.Fatal(err)
		}
		b.Modules = append(b.Modules, bundle.ModuleFile{URL: "/" + name, Path: "/" + name, Raw: src, Parsed: m})
	}
	b.Manifest.Init()
	if signed {
		key, err := os.ReadFile("../../bundles/testkeys/TEST-ONLY-signing-key.pem")
		if err != nil {
			t.Fatal(err)
		}
		if err := b.GenerateSignature(bundle.NewSigningConfig(string(key), "RS256", ""), "default", false); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if err := bundle.NewWriter(&buf).Write(b); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func writeTemp(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPolicyEvalExplainsExample(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"--principal", "alice", "--traits", "groups=dev", "--cluster", "demo", "--labels", "env=dev"},
			[]string{"limen:edit  granted by role edit-dev", "limen:view  granted by role view-everywhere"}},
		{[]string{"--principal", "alice", "--traits", "groups=dev", "--cluster", "prod"},
			[]string{"limen:view  granted by role view-everywhere"}},
		{[]string{"--principal", "bob", "--cluster", "prod"}, []string{"(none: access denied)"}},
		// The provider's bob is not the local bob (bindings.users.bob).
		{[]string{"--principal", "bob", "--cluster", "demo"}, []string{"limen:view  granted by role view-demo"}},
		{[]string{"--principal", "bob", "--issuer", "oidc", "--cluster", "demo"}, []string{"(none: access denied)"}},
		{[]string{"--principal", "carol@example.com", "--issuer", "oidc", "--traits", "groups=dev", "--cluster", "demo", "--labels", "env=dev"},
			[]string{"limen:edit  granted by role edit-dev"}},
		{[]string{"--principal", "ci-deployer", "--kind", "bot", "--cluster", "demo"}, []string{"limen:edit  granted by role deploy-demo"}},
		{[]string{"--principal", "dana", "--traits", "groups=admins", "--cluster", "x", "--action", "user.lock"}, []string{"user.lock  allowed"}},
	}
	for _, tt := range tests {
		out, err := runPolicyCLI(t, append([]string{"eval"}, tt.args...)...)
		if err != nil {
			t.Fatalf("eval %q: %v", tt.args, err)
		}
		flat := strings.Join(strings.Fields(out), " ")
		for _, w := range tt.want {
			if !strings.Contains(flat, strings.Join(strings.Fields(w), " ")) {
				t.Errorf("eval %q printed\n%s\nwant %q", tt.args, out, w)
			}
		}
	}
}

func TestPolicyEvalRejectsBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"--cluster", "demo"},
		{"--principal", "alice"},
		{"--principal", "alice", "--cluster", "demo", "--traits", "groups"},
		{"--principal", "alice", "--cluster", "demo", "--kind", "robot"},
		{"--principal", "system:admin", "--cluster", "demo"},
		{"--principal", "alice", "--cluster", "demo", "--labels", "env=a,env=b"},
		{"--principal", "alice", "--cluster", "demo", "--bundle", "/nonexistent.tar.gz", "--insecure-skip-verify"},
	} {
		if _, err := runPolicyCLI(t, append([]string{"eval"}, args...)...); err == nil {
			t.Errorf("eval %q succeeded", args)
		}
	}
}

// bundleHost is an https bundle server with its own test CA; the handler
// can be swapped between requests.
type bundleHost struct {
	*httptest.Server
	caFile  string
	mu      sync.Mutex
	handler http.HandlerFunc
}

func newBundleHost(t *testing.T) *bundleHost {
	t.Helper()
	authority, err := ca.Open(ca.Options{DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h := &bundleHost{caFile: writeTemp(t, "bundle-ca.pem", authority.RootPEM())}
	h.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		f := h.handler
		h.mu.Unlock()
		f(w, r)
	}))
	h.TLS = &tls.Config{Certificates: []tls.Certificate{authority.ServingCertificate()}}
	h.StartTLS()
	t.Cleanup(h.Close)
	return h
}

func (h *bundleHost) serve(f http.HandlerFunc) {
	h.mu.Lock()
	h.handler = f
	h.mu.Unlock()
}

func (h *bundleHost) serveBundle(raw []byte) {
	h.serve(func(w http.ResponseWriter, _ *http.Request) { w.Write(raw) })
}

func TestPolicyEvalBundleURL(t *testing.T) {
	srv := newBundleHost(t)
	srv.serveBundle(exampleBundle(t, "1", true))
	out, err := runPolicyCLI(t, "eval", "--principal", "bob", "--cluster", "demo", "--bundle", srv.URL+"/b.tar.gz", "--public-key", testPublicKey, "--policy-bundle-ca", srv.caFile, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got evalOutput
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err, out)
	}
	if got.Revision != "1" || len(got.Groups) != 1 || got.Groups[0] != "limen:view" {
		t.Fatalf("eval = %+v", got)
	}
	if _, err := runPolicyCLI(t, "eval", "--principal", "bob", "--cluster", "demo", "--bundle", srv.URL, "--insecure-skip-verify", "--policy-bundle-ca", srv.caFile); err == nil {
		t.Fatal("a URL bundle was accepted without verification")
	}
	if _, err := runPolicyCLI(t, "eval", "--principal", "bob", "--cluster", "demo", "--bundle", srv.URL+"/b.tar.gz", "--public-key", testPublicKey); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("eval without the bundle CA = %v, want a certificate error", err)
	}
	plain := "http://" + srv.Listener.Addr().String() + "/b.tar.gz"
	if _, err := runPolicyCLI(t, "eval", "--principal", "bob", "--cluster", "demo", "--bundle", plain, "--public-key", testPublicKey); err == nil || !strings.Contains(err.Error(), "https only") {
		t.Fatalf("eval with an http bundle URL = %v, want a refusal naming https", err)
	}
}

// TestHTTPBundleURLRefusedAtStart: the proxy, the worker and `policy
// status --probe` refuse an http:// policy-bundle-url at start, naming the
// key, before opening a CA, enrolling or fetching.
func TestHTTPBundleURLRefusedAtStart(t *testing.T) {
	var hits atomic.Int32
	plain := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer plain.Close()
	url := plain.URL + "/bundle.tar.gz"
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"proxy", []string{"proxy", "--listen", "127.0.0.1:0"}},
		{"worker", []string{"worker", "--proxy", plain.Listener.Addr().String(), "--kube-cluster", "demo", "--join-token", "t"}},
		{"policy status --probe", []string{"policy", "status", "--probe"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			root := newRootCmd()
			root.SetOut(io.Discard)
			root.SetErr(io.Discard)
			root.SetArgs(append(tt.args, "--data-dir", dir, "--policy-bundle-url", url, "--policy-public-key", testPublicKey))
			// The configuration is refused before the context is used; were
			// it accepted, the cancelled context ends the proxy, the
			// enrollment or the fetch at once, without this error.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			err := root.ExecuteContext(ctx)
			if err == nil || !strings.Contains(err.Error(), "policy-bundle-url") || !strings.Contains(err.Error(), "https only") {
				t.Fatalf("%s with an http bundle URL = %v, want an error naming policy-bundle-url", tt.name, err)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Fatalf("%s wrote %d entries in its data dir before refusing its configuration", tt.name, len(entries))
			}
		})
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the http server was asked %d times", n)
	}
}

func TestPolicyCheck(t *testing.T) {
	good := writeTemp(t, "good.tar.gz", exampleBundle(t, "1", true))
	unsigned := writeTemp(t, "unsigned.tar.gz", exampleBundle(t, "1", false))
	corrupt := writeTemp(t, "corrupt.tar.gz", []byte("not a bundle"))
	out, err := runPolicyCLI(t, "check", good, "--public-key", testPublicKey)
	if err != nil || !strings.Contains(out, "revision 1") {
		t.Fatalf("check good: %q, %v", out, err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"check", unsigned, "--public-key", testPublicKey}, "missing .signatures.json"},
		{[]string{"check", good}, "public-key: required"},
		{[]string{"check", corrupt, "--insecure-skip-verify"}, "bundle refused"},
	} {
		if _, err := runPolicyCLI(t, tt.args...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: err = %v, want %q", tt.args, err, tt.want)
		}
	}
}

func TestPolicyStatus(t *testing.T) {
	dir := t.TempDir()
	if _, err := runPolicyCLI(t, "status", "--data-dir", dir); err == nil {
		t.Fatal("status without a saved status succeeded")
	}
	// A process with --data-dir DIR saves its status in DIR/policy.
	e, err := policy.New(context.Background(), policy.Options{PersistDir: filepath.Join(dir, "policy"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	out, err := runPolicyCLI(t, "status", "--data-dir", dir)
	if err != nil || !strings.Contains(out, "embedded") || !strings.Contains(strings.Join(strings.Fields(out), " "), "revision embedded-") {
		t.Fatalf("status: %q, %v", out, err)
	}
	out, err = runPolicyCLI(t, "status", "--probe", "--json")
	if err != nil || !strings.Contains(out, `"source": "embedded"`) {
		t.Fatalf("status --probe: %q, %v", out, err)
	}
}

// TestPolicyStatusShowsRefusals drives a real engine, with the persist
// directory a proxy would use, through each kind of refusal and reads them
// back with `limen policy status`: time, reason and revision on each line.
func TestPolicyStatusShowsRefusals(t *testing.T) {
	dir := t.TempDir()
	srv := newBundleHost(t)
	pub, err := os.ReadFile(testPublicKey)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(srv.caFile)
	if err != nil {
		t.Fatal(err)
	}
	e, err := policy.New(context.Background(), policy.Options{BundleURL: srv.URL + "/b.tar.gz", BundleCAPEM: caPEM, PublicKeyPEM: pub,
		PersistDir: filepath.Join(dir, "policy"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	srv.serveBundle(exampleBundle(t, "20250102000000", true))
	if err := e.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	plain := httptest.NewServer(http.NotFoundHandler())
	defer plain.Close()
	other := exampleBundle(t, "20250102000000", true)
	steps := []struct {
		reason, revision string
		serve            http.HandlerFunc
	}{
		{policy.ReasonRollback, "20250101000000", bundleBytes(exampleBundle(t, "20250101000000", true))},
		{policy.ReasonSameRevision, "20250102000000", bundleBytes(withRole(t, other))},
		{policy.ReasonSignature, "20250103000000 unverified", bundleBytes(exampleBundle(t, "20250103000000", false))},
		{policy.ReasonNotHTTPS, "-", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, plain.URL+"/b.tar.gz", http.StatusFound)
		}},
		{policy.ReasonFetch, "-", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "down", http.StatusBadGateway) }},
	}
	for _, st := range steps {
		srv.serve(st.serve)
		if err := e.Refresh(context.Background()); err == nil {
			t.Fatalf("step %s: Refresh succeeded", st.reason)
		}
	}
	out, err := runPolicyCLI(t, "status", "--data-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "refusal ") {
			lines = append(lines, strings.Join(strings.Fields(l), " "))
		}
	}
	if len(lines) != len(steps) {
		t.Fatalf("status shows %d refusals, want %d:\n%s", len(lines), len(steps), out)
	}
	for i, st := range steps {
		l := lines[len(steps)-1-i] // newest first
		want := regexp.MustCompile(`^refusal \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ` + regexp.QuoteMeta(st.reason+" revision "+st.revision+" (active 20250102000000): "))
		if !want.MatchString(l) {
			t.Errorf("refusal line %q: want %s", l, want)
		}
	}
	if !strings.Contains(strings.Join(strings.Fields(out), " "), "revision 20250102000000 activated") {
		t.Errorf("status does not show the active revision:\n%s", out)
	}
	js, err := runPolicyCLI(t, "status", "--data-dir", dir, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got policy.Status
	if err := json.Unmarshal([]byte(js), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Refusals) != len(steps) || got.Refusals[len(steps)-1].Reason != policy.ReasonRollback || got.Refusals[len(steps)-1].At.IsZero() {
		t.Fatalf("status --json refusals = %+v", got.Refusals)
	}
}

func bundleBytes(raw []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) { w.Write(raw) }
}

// withRole is the example bundle plus one more role, re-signed under the
// same revision: the same number with other content.
func withRole(t *testing.T, raw []byte) []byte {
	t.Helper()
	b, err := bundle.NewReader(bytes.NewReader(raw)).WithSkipBundleVerification(true).Read()
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.Data["limen"].(map[string]any)["config"].(map[string]any)
	cfg["roles"].(map[string]any)["extra"] = map[string]any{"groups": []any{"limen:view"}, "clusters": []any{map[string]any{"name": "x"}}}
	b.Signatures = bundle.SignaturesConfig{}
	key, err := os.ReadFile("../../bundles/testkeys/TEST-ONLY-signing-key.pem")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.GenerateSignature(bundle.NewSigningConfig(string(key), "RS256", ""), "default", false); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := bundle.NewWriter(&buf).Write(b); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestParsePairs(t *testing.T) {
	got, err := parsePairs("traits", []string{"groups=dev", "groups=ops", "team=a=b", "empty="})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got["groups"], ",") != "dev,ops" || got["team"][0] != "a=b" || got["empty"][0] != "" {
		t.Fatalf("parsePairs = %v", got)
	}
	for _, bad := range []string{"groups", "=dev", " =dev", ""} {
		if _, err := parsePairs("traits", []string{bad}); err == nil {
			t.Errorf("parsePairs(%q) succeeded", bad)
		}
	}
}

// FuzzEvalInput: any flag values either give a principal and cluster that
// pass the engine's validation, or an error, never a panic.
func FuzzEvalInput(f *testing.F) {
	f.Add("alice", "user", "groups=dev", "demo", "env=dev")
	f.Add("", "bot", "=", "", "a=b=c")
	f.Fuzz(func(t *testing.T, name, kind, trait, cluster, label string) {
		p, _, err := evalInput(name, kind, []string{trait}, cluster, []string{label})
		if err == nil {
			if verr := p.Validate(); verr != nil {
				t.Fatalf("accepted an invalid principal: %v", verr)
			}
		}
	})
}
