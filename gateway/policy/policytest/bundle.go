// Package policytest builds policy bundles for tests in other packages: the
// embedded Rego with data of the test's own, so that a test can register a
// client or a role the example data lacks and still run the real policy.
package policytest

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"

	"github.com/limenhq/limen/bundles"
	"github.com/limenhq/limen/policies"
)

// ExampleData returns the embedded example data (bundles/example), decoded,
// for a test to change before it builds a bundle.
func ExampleData(t testing.TB) map[string]any {
	t.Helper()
	var data map[string]any
	if err := json.Unmarshal(bundles.ExampleData(), &data); err != nil {
		t.Fatalf("example data: %v", err)
	}
	return data
}

// Config returns data's data.limen.config object, for a test to edit in place.
func Config(t testing.TB, data map[string]any) map[string]any {
	t.Helper()
	limen, _ := data["limen"].(map[string]any)
	config, _ := limen["config"].(map[string]any)
	if config == nil {
		t.Fatal("the data has no limen.config object")
	}
	return config
}

// Bundle returns an unsigned bundle (tar.gz) of the embedded policies with
// data, at revision (an unsigned decimal integer); load it with policy.Options{Bundle: b,
// InsecureSkipVerify: true}.
func Bundle(t testing.TB, revision string, data map[string]any) []byte {
	t.Helper()
	return write(t, build(t, revision, data))
}

// SignedBundle is Bundle signed with the PEM private key (RS256, key id
// "default", as `opa build --signing-key` signs), for a bundle service that
// verifies signatures: pass the matching public key as
// policy.Options.PublicKeyPEM.
func SignedBundle(t testing.TB, revision string, data map[string]any, keyPEM []byte) []byte {
	t.Helper()
	b := build(t, revision, data)
	if err := b.GenerateSignature(bundle.NewSigningConfig(string(keyPEM), "RS256", ""), "default", false); err != nil {
		t.Fatalf("sign bundle: %v", err)
	}
	return write(t, b)
}

func build(t testing.TB, revision string, data map[string]any) bundle.Bundle {
	t.Helper()
	b := bundle.Bundle{Data: data, Manifest: bundle.Manifest{Revision: revision}}
	err := fs.WalkDir(policies.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(name, ".rego") {
			return err
		}
		src, err := fs.ReadFile(policies.FS(), name)
		if err != nil {
			return err
		}
		m, err := ast.ParseModuleWithOpts(name, string(src), ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			return err
		}
		b.Modules = append(b.Modules, bundle.ModuleFile{URL: "/" + name, Path: "/" + name, Raw: src, Parsed: m})
		return nil
	})
	if err != nil {
		t.Fatalf("policies: %v", err)
	}
	b.Manifest.Init()
	return b
}

func write(t testing.TB, b bundle.Bundle) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := bundle.NewWriter(&buf).Write(b); err != nil {
		t.Fatalf("write bundle: %v", err)
	}
	return buf.Bytes()
}
