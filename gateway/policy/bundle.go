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

// readBundle parses a bundle tarball, verifies its signature and reads its
// revision. raw is never trusted: size limits, signature and structure are
// checked before anything is compiled. Errors are refusals that name their
// reason (see Status.Refusals).
func readBundle(raw []byte, v *verifier, limit int64) (content, error) {
	if int64(len(raw)) > limit {
		return content{}, &refusal{reason: ReasonInvalid, err: fmt.Errorf("%w: bundle is %d bytes, limit %d", ErrBundleRefused, len(raw), limit)}
	}
	b, err := parseBundle(raw, v, limit)
	if err != nil {
		r := &refusal{reason: ReasonInvalid, err: fmt.Errorf("%w: read bundle: %v", ErrBundleRefused, err)}
		// OPA's errors carry no type; a bundle that reads without
		// verification but not with it failed on its signature. Its
		// revision is then only a claim, reported as such.
		if v != nil {
			if ub, uerr := parseBundle(raw, nil, limit); uerr == nil {
				r.reason, r.revision, r.unverified = ReasonSignature, ub.Manifest.Revision, true
			}
		}
		return content{}, r
	}
	rev := b.Manifest.Revision
	invalid := func(format string, args ...any) error {
		return &refusal{reason: ReasonInvalid, revision: rev, err: fmt.Errorf("%w: "+format, append([]any{ErrBundleRefused}, args...)...)}
	}
	switch {
	case b.Type() != bundle.SnapshotBundleType:
		return content{}, invalid("%s bundles are not supported: serve a snapshot bundle", b.Type())
	case len(b.WasmModules) > 0 || len(b.PlanModules) > 0:
		return content{}, invalid("wasm and plan bundles are not supported: build with the default rego target")
	}
	n, err := ParseRevision(rev)
	if err != nil {
		return content{}, &refusal{reason: ReasonBadRevision, revision: rev, err: fmt.Errorf("%w: %v", ErrBundleRefused, err)}
	}
	c := content{revision: rev, modules: map[string]*ast.Module{}, data: b.Data}
	sources := map[string][]byte{}
	for _, m := range b.Modules {
		if m.Parsed == nil {
			return content{}, invalid("module %s was not parsed", m.Path)
		}
		if _, dup := c.modules[m.Path]; dup {
			return content{}, invalid("module %s appears twice", m.Path)
		}
		c.modules[m.Path] = m.Parsed
		sources[m.Path] = m.Raw
	}
	digest, err := contentDigest(sources, c.data)
	if err != nil {
		return content{}, invalid("%v", err)
	}
	c.mark = &mark{revision: rev, n: n, digest: digest}
	return c, nil
}

// parseBundle runs OPA's bundle reader, verifying with v unless it is nil.
func parseBundle(raw []byte, v *verifier, limit int64) (bundle.Bundle, error) {
	r := bundle.NewReader(bytes.NewReader(raw)).WithSizeLimitBytes(limit)
	if v == nil {
		r = r.WithSkipBundleVerification(true)
	} else {
		keys := map[string]*bundle.KeyConfig{v.keyID: {Key: string(v.key), Algorithm: v.alg}}
		r = r.WithBundleVerificationConfig(bundle.NewVerificationConfig(keys, v.keyID, "", nil))
	}
	return r.Read()
}
