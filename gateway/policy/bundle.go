package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"

	"github.com/limenhq/limen/bundles"
	"github.com/limenhq/limen/policies"
)

// embeddedContent is the default bundle: policies/*.rego and
// bundles/example/data.json, both compiled into the binary. Its revision is
// a digest of both, so a rebuilt binary with other policy shows another one.
func embeddedContent() (content, error) {
	h := sha256.New()
	modules := map[string]*ast.Module{}
	files, err := fs.Glob(policies.FS(), "*.rego")
	if err != nil {
		return content{}, err
	}
	for _, name := range files {
		src, err := fs.ReadFile(policies.FS(), name)
		if err != nil {
			return content{}, err
		}
		h.Write([]byte(name))
		h.Write(src)
		m, err := ast.ParseModuleWithOpts(path.Join("policies", name), string(src), ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			return content{}, fmt.Errorf("embedded policy %s: %w", name, err)
		}
		modules[m.Package.Location.File] = m
	}
	raw := bundles.ExampleData()
	h.Write(raw)
	var data map[string]any
	if err := json.Unmarshal(raw, &data); err != nil {
		return content{}, fmt.Errorf("embedded data bundles/example/data.json: %w", err)
	}
	return content{revision: "embedded-" + hex.EncodeToString(h.Sum(nil))[:12], modules: modules, data: data}, nil
}

// verifier is how bundle signatures are checked; nil skips verification.
type verifier struct {
	keyID, alg string
	key        []byte
}

func (o Options) verifier() *verifier {
	if len(o.PublicKeyPEM) == 0 {
		return nil
	}
	return &verifier{keyID: o.KeyID, alg: o.KeyAlgorithm, key: o.PublicKeyPEM}
}

// readBundle parses a bundle tarball and verifies its signature. raw is
// never trusted: size limits, signature and structure are checked before
// anything is compiled.
func readBundle(raw []byte, v *verifier, limit int64) (content, error) {
	if int64(len(raw)) > limit {
		return content{}, fmt.Errorf("%w: bundle is %d bytes, limit %d", ErrBundleRefused, len(raw), limit)
	}
	r := bundle.NewReader(bytes.NewReader(raw)).WithSizeLimitBytes(limit)
	if v == nil {
		r = r.WithSkipBundleVerification(true)
	} else {
		keys := map[string]*bundle.KeyConfig{v.keyID: {Key: string(v.key), Algorithm: v.alg}}
		r = r.WithBundleVerificationConfig(bundle.NewVerificationConfig(keys, v.keyID, "", nil))
	}
	b, err := r.Read()
	if err != nil {
		return content{}, fmt.Errorf("%w: read bundle: %v", ErrBundleRefused, err)
	}
	switch {
	case b.Type() != bundle.SnapshotBundleType:
		return content{}, fmt.Errorf("%w: %s bundles are not supported: serve a snapshot bundle", ErrBundleRefused, b.Type())
	case len(b.WasmModules) > 0 || len(b.PlanModules) > 0:
		return content{}, fmt.Errorf("%w: wasm and plan bundles are not supported: build with the default rego target", ErrBundleRefused)
	}
	c := content{revision: b.Manifest.Revision, modules: map[string]*ast.Module{}, data: b.Data}
	if c.revision == "" {
		sum := sha256.Sum256(raw)
		c.revision = "sha256-" + hex.EncodeToString(sum[:6])
	}
	for _, m := range b.Modules {
		if m.Parsed == nil {
			return content{}, fmt.Errorf("%w: module %s was not parsed", ErrBundleRefused, m.Path)
		}
		if _, dup := c.modules[m.Path]; dup {
			return content{}, fmt.Errorf("%w: module %s appears twice", ErrBundleRefused, m.Path)
		}
		c.modules[m.Path] = m.Parsed
	}
	return c, nil
}
