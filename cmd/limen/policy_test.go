package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"

	"github.com/limenhq/limen/bundles"
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

func TestPolicyEvalBundleURL(t *testing.T) {
	raw := exampleBundle(t, "served", true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(raw) }))
	defer srv.Close()
	out, err := runPolicyCLI(t, "eval", "--principal", "bob", "--cluster", "demo", "--bundle", srv.URL+"/b.tar.gz", "--public-key", testPublicKey, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got evalOutput
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err, out)
	}
	if got.Revision != "served" || len(got.Groups) != 1 || got.Groups[0] != "limen:view" {
		t.Fatalf("eval = %+v", got)
	}
	if _, err := runPolicyCLI(t, "eval", "--principal", "bob", "--cluster", "demo", "--bundle", srv.URL, "--insecure-skip-verify"); err == nil {
		t.Fatal("a URL bundle was accepted without verification")
	}
}

func TestPolicyCheck(t *testing.T) {
	good := writeTemp(t, "good.tar.gz", exampleBundle(t, "r1", true))
	unsigned := writeTemp(t, "unsigned.tar.gz", exampleBundle(t, "r1", false))
	corrupt := writeTemp(t, "corrupt.tar.gz", []byte("not a bundle"))
	out, err := runPolicyCLI(t, "check", good, "--public-key", testPublicKey)
	if err != nil || !strings.Contains(out, "revision r1") {
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
