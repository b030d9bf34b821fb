package policy

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"

	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/policies"
)

// Test principals and clusters from bundles/example/data.json.
var (
	alice  = identity.Principal{ClientID: "kubectl", Kind: identity.KindUser, Name: "alice", Traits: map[string][]string{"groups": {"dev"}}}
	bob    = identity.Principal{ClientID: "kubectl", Kind: identity.KindUser, Name: "bob"}
	dana   = identity.Principal{ClientID: "kubectl", Kind: identity.KindUser, Name: "dana", Traits: map[string][]string{"groups": {"admins"}}}
	ci     = identity.Principal{ClientID: "kubectl", Kind: identity.KindBot, Name: "ci-deployer"}
	demo   = Cluster{Name: "demo", Labels: map[string]string{"env": "dev"}}
	prod   = Cluster{Name: "prod", Labels: map[string]string{"env": "prod"}}
	devTwo = Cluster{Name: "dev-2", Labels: map[string]string{"env": "dev"}}
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testKeys reads the committed TEST key pair (bundles/testkeys).
func testKeys(t testing.TB) (private, public []byte) {
	t.Helper()
	dir := filepath.Join("..", "..", "bundles", "testkeys")
	priv, err := os.ReadFile(filepath.Join(dir, "TEST-ONLY-signing-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := os.ReadFile(filepath.Join(dir, "TEST-ONLY-verification-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return priv, pub
}

// defaultRego returns the embedded policy files, path → source.
func defaultRego(t testing.TB) map[string]string {
	t.Helper()
	names, err := fs.Glob(policies.FS(), "*.rego")
	if err != nil || len(names) == 0 {
		t.Fatalf("embedded policy: %v (%d files)", err, len(names))
	}
	out := map[string]string{}
	for _, name := range names {
		b, err := fs.ReadFile(policies.FS(), name)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = string(b)
	}
	return out
}

// buildBundle writes a bundle tarball with OPA's own bundle writer, signed
// with signingKey unless it is nil.
func buildBundle(t testing.TB, revision string, rego map[string]string, data map[string]any, signingKey []byte) []byte {
	t.Helper()
	b := bundle.Bundle{Data: data, Manifest: bundle.Manifest{Revision: revision}}
	for name, src := range rego {
		m, err := ast.ParseModuleWithOpts(name, src, ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			t.Fatal(err)
		}
		b.Modules = append(b.Modules, bundle.ModuleFile{URL: "/" + name, Path: "/" + name, Raw: []byte(src), Parsed: m})
	}
	b.Manifest.Init()
	if signingKey != nil {
		sc := bundle.NewSigningConfig(string(signingKey), "RS256", "")
		if err := b.GenerateSignature(sc, "default", false); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if err := bundle.NewWriter(&buf).Write(b); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// withManifest returns raw with its .manifest file replaced by manifest and
// everything else, the signature included, unchanged: a bundle whose
// revision was edited after signing.
func withManifest(t testing.TB, raw []byte, manifest string) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	tw := tar.NewWriter(zw)
	replaced := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimPrefix(h.Name, "/") == ".manifest" {
			body, replaced = []byte(manifest), true
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write(body)
	}
	if !replaced {
		t.Fatal("the bundle has no .manifest to replace")
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// exampleConfig is a data.limen.config with the given roles and user bindings.
func exampleData(roles map[string]any, users map[string]any) map[string]any {
	return map[string]any{"limen": map[string]any{"config": map[string]any{
		"roles":    roles,
		"bindings": map[string]any{"users": users},
		"clients":  map[string]any{"kubectl": map[string]any{"unscoped": true}},
	}}}
}

func role(groups []any, clusters ...any) map[string]any {
	return map[string]any{"groups": groups, "clusters": clusters}
}

func mustEmbedded(t testing.TB, opts Options) *Engine {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	e, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
