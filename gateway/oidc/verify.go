// Package oidc signs people and CI workloads in through an OpenID Connect
// provider. It checks ID tokens strictly (go-oidc does the JOSE work: JWKS
// signature, issuer, expiry; this package adds nonce, the client rules for
// azp and aud, and email_verified), maps claims to a Limen principal, and
// runs the code flow (with PKCE) and the device flow for the proxy.
package oidc

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
)

// Rule names one check a token must pass. A refusal names the rule it broke.
type Rule string

// The rules, in the order they are checked.
const (
	RuleSignature     Rule = "signature"      // signed by a key of the issuer's JWKS
	RuleIssuer        Rule = "issuer"         // iss is the configured issuer
	RuleExpiry        Rule = "expiry"         // exp in the future, nbf not ahead
	RuleNonce         Rule = "nonce"          // nonce is the one the login sent
	RuleAZP           Rule = "azp"            // azp, when present, is a string among the audiences
	RuleAudience      Rule = "aud"            // without azp, exactly one audience
	RuleClient        Rule = "client"         // the token's client is this Limen's client ID
	RuleEmailVerified Rule = "email_verified" // when email is identity, email_verified is boolean true
	RuleClaims        Rule = "claims"         // claims Limen maps are present and of a usable type
)

// RefusedError says which rule a token broke and why.
type RefusedError struct {
	Rule   Rule
	Reason string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("ID token refused (rule %s): %s", e.Rule, e.Reason)
}

func refuse(r Rule, format string, args ...any) error {
	return &RefusedError{Rule: r, Reason: fmt.Sprintf(format, args...)}
}

// RuleOf returns the rule err names, or "" when err is not a refusal.
func RuleOf(err error) Rule {
	var re *RefusedError
	if errors.As(err, &re) {
		return re.Rule
	}
	return ""
}

// Token is a verified ID token.
type Token struct {
	Issuer  string
	Subject string
	// Client is the party the token was issued to: azp, or the only audience.
	Client string
	Expiry time.Time
	// Claims are all the token's claims, as JSON decoded them.
	Claims map[string]any
}

// Verifier checks ID tokens of one issuer for one client.
type Verifier struct {
	issuer, clientID string
	keys             oidc.KeySet
	strict, lenient  *oidc.IDTokenVerifier
}

// NewVerifier checks tokens from issuer, signed with one of algs (nil:
// RS256) by a key in keys, issued to clientID. now may be nil (time.Now).
func NewVerifier(issuer, clientID string, keys oidc.KeySet, algs []string, now func() time.Time) (*Verifier, error) {
	if issuer == "" || clientID == "" {
		return nil, errors.New("oidc verifier: issuer and client ID are both required")
	}
	// go-oidc's own audience check accepts a token whose audience list merely
	// contains the client; the client rules below are stricter, so they
	// replace it.
	cfg := &oidc.Config{SkipClientIDCheck: true, Now: now, SupportedSigningAlgs: algs}
	lenient := *cfg
	lenient.SkipIssuerCheck, lenient.SkipExpiryCheck = true, true
	return &Verifier{issuer: issuer, clientID: clientID, keys: keys,
		strict: oidc.NewVerifier(issuer, keys, cfg), lenient: oidc.NewVerifier(issuer, keys, &lenient)}, nil
}

// Verify checks raw and returns its claims. nonce is the nonce the login
// sent, or "" for flows that carry none (device flow, CI workload tokens).
func (v *Verifier) Verify(ctx context.Context, raw, nonce string) (*Token, error) {
	t, err := v.strict.Verify(ctx, raw)
	if err != nil {
		return nil, v.classify(ctx, raw, err)
	}
	if nonce != "" && subtle.ConstantTimeCompare([]byte(t.Nonce), []byte(nonce)) != 1 {
		return nil, refuse(RuleNonce, "the token's nonce is not the one this login sent (replayed or mixed-up login)")
	}
	var claims map[string]any
	if err := t.Claims(&claims); err != nil {
		return nil, refuse(RuleClaims, "claims are not a JSON object: %v", err)
	}
	var raws rawClaims
	if err := t.Claims(&raws); err != nil {
		return nil, refuse(RuleClaims, "claims are not a JSON object: %v", err)
	}
	client, err := raws.client()
	if err != nil {
		return nil, err
	}
	if client != v.clientID {
		return nil, refuse(RuleClient, "the token was issued to client %q, not to %q", client, v.clientID)
	}
	return &Token{Issuer: t.Issuer, Subject: t.Subject, Client: client, Expiry: t.Expiry, Claims: claims}, nil
}

// classify tells which of go-oidc's checks failed. Expiry has its own
// error type. Otherwise the key set is asked about the signature alone: a
// bad one is the signature rule; with a good one, the claims' form, then
// the issuer, then nbf are what go-oidc refused.
func (v *Verifier) classify(ctx context.Context, raw string, err error) error {
	var exp *oidc.TokenExpiredError
	if errors.As(err, &exp) {
		return refuse(RuleExpiry, "the token expired at %s", exp.Expiry.UTC().Format(time.RFC3339))
	}
	payload, serr := v.keys.VerifySignature(ctx, raw)
	if serr != nil {
		return refuse(RuleSignature, "%v", err)
	}
	if _, cerr := ClientOf(payload); cerr != nil {
		return cerr
	}
	t, lerr := v.lenient.Verify(ctx, raw)
	if lerr != nil {
		return refuse(RuleClaims, "%v", lerr)
	}
	if t.Issuer != v.issuer {
		return refuse(RuleIssuer, "issued by %q, want %q", t.Issuer, v.issuer)
	}
	return refuse(RuleExpiry, "%v", err)
}

// rawClaims holds azp and aud undecoded, so that their JSON types can be
// checked: a number or a list where a string belongs is a refusal, never a
// coercion.
type rawClaims struct {
	AZP json.RawMessage `json:"azp"`
	Aud json.RawMessage `json:"aud"`
}

// ClientOf returns the client a token's claims (its JSON payload) name,
// applying the client rules. It is what Verify uses after the signature
// checks; exported for the fuzz test and for callers holding claims.
func ClientOf(payload []byte) (string, error) {
	var rc rawClaims
	if err := json.Unmarshal(payload, &rc); err != nil {
		return "", refuse(RuleClaims, "claims are not a JSON object: %v", err)
	}
	return rc.client()
}

func (rc rawClaims) client() (string, error) {
	auds, err := audiences(rc.Aud)
	if err != nil {
		return "", err
	}
	if present(rc.AZP) {
		var azp string
		if err := json.Unmarshal(rc.AZP, &azp); err != nil {
			return "", refuse(RuleAZP, "azp must be a string, got %s", clip(rc.AZP))
		}
		for _, a := range auds {
			if a == azp && azp != "" {
				return azp, nil
			}
		}
		return "", refuse(RuleAZP, "azp %q is not one of the audiences %q", azp, auds)
	}
	if len(auds) != 1 {
		return "", refuse(RuleAudience, "without azp the token must have exactly one audience, it has %d (%q)", len(auds), auds)
	}
	return auds[0], nil
}

// audiences decodes aud: a non-empty string or a list of non-empty strings.
func audiences(raw json.RawMessage) ([]string, error) {
	if !present(raw) {
		return nil, refuse(RuleAudience, "the token has no aud")
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		if one == "" {
			return nil, refuse(RuleAudience, "aud is empty")
		}
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, refuse(RuleAudience, "aud must be a string or a list of strings, got %s", clip(raw))
	}
	for _, a := range list {
		if a == "" {
			return nil, refuse(RuleAudience, "aud lists an empty audience")
		}
	}
	return list, nil
}

// present reports whether a claim is there at all; JSON null counts as
// there (and is then refused for its type).
func present(raw json.RawMessage) bool { return len(raw) > 0 }

func clip(raw []byte) string {
	if len(raw) > 64 {
		return string(raw[:64]) + "…"
	}
	return string(raw)
}

// Issuer is the issuer v accepts.
func (v *Verifier) Issuer() string { return v.issuer }
