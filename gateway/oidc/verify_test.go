package oidc

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
)

// testIssuer signs tokens with a key it publishes as JWKS over HTTP, so
// the verifier fetches and checks keys exactly as it does in production.
type testIssuer struct {
	url   string
	key   *ecdsa.PrivateKey
	other *ecdsa.PrivateKey // a key not in the JWKS
	now   time.Time
}

func newTestIssuer(t *testing.T) *testIssuer {
	t.Helper()
	ti := &testIssuer{now: time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)}
	var err error
	if ti.key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		t.Fatal(err)
	}
	if ti.other, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &ti.key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	}))
	t.Cleanup(srv.Close)
	ti.url = srv.URL
	return ti
}

func (ti *testIssuer) verifier(t *testing.T, client string) *Verifier {
	t.Helper()
	v, err := NewVerifier(ti.url, client, oidc.NewRemoteKeySet(context.Background(), ti.url+"/jwks"), []string{"ES256"},
		func() time.Time { return ti.now })
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// claims returns a valid token's claims for client limen.
func (ti *testIssuer) claims() map[string]any {
	return map[string]any{
		"iss": ti.url, "sub": "u1", "aud": "limen", "nonce": "n0nce",
		"iat": ti.now.Add(-time.Minute).Unix(), "exp": ti.now.Add(time.Hour).Unix(),
		"email": "alice@example.com", "email_verified": true, "groups": []any{"dev"},
	}
}

func (ti *testIssuer) sign(t *testing.T, key *ecdsa.PrivateKey, claims map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: "k1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := s.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

type tokenCase struct {
	name   string
	edit   func(ti *testIssuer, c map[string]any)
	key    func(ti *testIssuer) *ecdsa.PrivateKey // nil: the published key
	nonce  string
	want   Rule // "" accepts
	client string
}

func runTokenCases(t *testing.T, cases []tokenCase) {
	t.Helper()
	ti := newTestIssuer(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := ti.claims()
			if tc.edit != nil {
				tc.edit(ti, c)
			}
			key := ti.key
			if tc.key != nil {
				key = tc.key(ti)
			}
			nonce := tc.nonce
			if nonce == "" {
				nonce = "n0nce"
			}
			tok, err := ti.verifier(t, "limen").Verify(context.Background(), ti.sign(t, key, c), nonce)
			if got := RuleOf(err); got != tc.want || (tc.want == "" && err != nil) {
				t.Fatalf("Verify: rule %q, err %v; want rule %q", got, err, tc.want)
			}
			if err != nil && !strings.Contains(err.Error(), "rule "+string(tc.want)) {
				t.Fatalf("the error %q does not name rule %s", err, tc.want)
			}
			if tc.want == "" && tok.Client != "limen" {
				t.Fatalf("client %q, want limen", tok.Client)
			}
		})
	}
}

func TestRuleSignature(t *testing.T) {
	runTokenCases(t, []tokenCase{
		{name: "published key", want: ""},
		{name: "key not in the JWKS", key: func(ti *testIssuer) *ecdsa.PrivateKey { return ti.other }, want: RuleSignature},
	})
}

func TestRuleSignatureMalformed(t *testing.T) {
	ti := newTestIssuer(t)
	good := ti.sign(t, ti.key, ti.claims())
	parts := strings.Split(good, ".")
	for name, raw := range map[string]string{
		"not a JWT":      "hello",
		"payload edited": parts[0] + "." + strings.TrimRight(parts[1], "=") + "A." + parts[2],
		"no signature":   parts[0] + "." + parts[1] + ".",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ti.verifier(t, "limen").Verify(context.Background(), raw, ""); RuleOf(err) != RuleSignature {
				t.Fatalf("err %v, want rule signature", err)
			}
		})
	}
}

func TestRuleIssuer(t *testing.T) {
	runTokenCases(t, []tokenCase{
		{name: "same issuer", want: ""},
		{name: "other issuer", edit: func(_ *testIssuer, c map[string]any) { c["iss"] = "https://evil.example" }, want: RuleIssuer},
		{name: "trailing slash", edit: func(ti *testIssuer, c map[string]any) { c["iss"] = ti.url + "/" }, want: RuleIssuer},
		{name: "no issuer", edit: func(_ *testIssuer, c map[string]any) { delete(c, "iss") }, want: RuleIssuer},
	})
}

func TestRuleExpiry(t *testing.T) {
	runTokenCases(t, []tokenCase{
		{name: "valid", want: ""},
		{name: "expired", edit: func(ti *testIssuer, c map[string]any) { c["exp"] = ti.now.Add(-time.Second).Unix() }, want: RuleExpiry},
		{name: "no exp", edit: func(_ *testIssuer, c map[string]any) { delete(c, "exp") }, want: RuleExpiry},
		{name: "not yet valid", edit: func(ti *testIssuer, c map[string]any) { c["nbf"] = ti.now.Add(time.Hour).Unix() }, want: RuleExpiry},
	})
}

func TestRuleNonce(t *testing.T) {
	runTokenCases(t, []tokenCase{
		{name: "same nonce", want: ""},
		{name: "other nonce", nonce: "another", want: RuleNonce},
		{name: "token without nonce", edit: func(_ *testIssuer, c map[string]any) { delete(c, "nonce") }, want: RuleNonce},
	})
}

// TestRuleAZP: with azp, it must be a string and one of the audiences.
func TestRuleAZP(t *testing.T) {
	set := func(azp, aud any) func(*testIssuer, map[string]any) {
		return func(_ *testIssuer, c map[string]any) { c["azp"], c["aud"] = azp, aud }
	}
	runTokenCases(t, []tokenCase{
		{name: "azp among a list", edit: set("limen", []any{"limen", "kubernetes"}), want: ""},
		{name: "azp with a string aud", edit: set("limen", "limen"), want: ""},
		{name: "azp is another audience", edit: set("kubernetes", []any{"limen", "kubernetes"}), want: RuleClient},
		{name: "azp not an audience", edit: set("limen", []any{"kubernetes"}), want: RuleAZP},
		{name: "azp a list", edit: set([]any{"limen"}, "limen"), want: RuleAZP},
		{name: "azp a number", edit: set(7, "limen"), want: RuleAZP},
		{name: "azp null", edit: set(nil, "limen"), want: RuleAZP},
		{name: "azp empty", edit: set("", []any{"limen", ""}), want: RuleAudience},
		{name: "azp empty, aud one", edit: set("", "limen"), want: RuleAZP},
	})
}

// TestRuleAudience: without azp, aud is a string or a list of exactly one;
// several audiences without azp are refused in any order.
func TestRuleAudience(t *testing.T) {
	set := func(aud any) func(*testIssuer, map[string]any) {
		return func(_ *testIssuer, c map[string]any) { c["aud"] = aud }
	}
	runTokenCases(t, []tokenCase{
		{name: "string", edit: set("limen"), want: ""},
		{name: "list of one", edit: set([]any{"limen"}), want: ""},
		{name: "two, ours first", edit: set([]any{"limen", "kubernetes"}), want: RuleAudience},
		{name: "two, ours last", edit: set([]any{"kubernetes", "limen"}), want: RuleAudience},
		{name: "empty list", edit: set([]any{}), want: RuleAudience},
		{name: "number", edit: set(1), want: RuleAudience},
		{name: "missing", edit: func(_ *testIssuer, c map[string]any) { delete(c, "aud") }, want: RuleAudience},
		{name: "another client's", edit: set("kubernetes"), want: RuleClient},
	})
}

// TestRuleEmailVerified: when email is identity, email_verified must be the
// boolean true; a string "true" or a missing claim is refused.
func TestRuleEmailVerified(t *testing.T) {
	ti := newTestIssuer(t)
	for _, tc := range []struct {
		name string
		ev   any
		ok   bool
	}{
		{"true", true, true}, {"false", false, false}, {"string true", "true", false},
		{"number 1", 1, false}, {"missing", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ti.claims()
			if tc.ev == nil {
				delete(c, "email_verified")
			} else {
				c["email_verified"] = tc.ev
			}
			tok, err := ti.verifier(t, "limen").Verify(context.Background(), ti.sign(t, ti.key, c), "n0nce")
			if err != nil {
				t.Fatal(err)
			}
			p, err := DefaultMapping().Principal("user", tok.Claims)
			if tc.ok != (err == nil) || (!tc.ok && RuleOf(err) != RuleEmailVerified) {
				t.Fatalf("Principal: %v, want ok=%v (rule email_verified)", err, tc.ok)
			}
			if tc.ok && (p.Name != "alice@example.com" || p.Traits["groups"][0] != "dev") {
				t.Fatalf("principal %+v", p)
			}
		})
	}
	// When neither the name nor a trait comes from email, email_verified is
	// not consulted.
	c := ti.claims()
	c["email_verified"] = false
	tok, err := ti.verifier(t, "limen").Verify(context.Background(), ti.sign(t, ti.key, c), "n0nce")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (Mapping{Username: "sub"}).Principal("user", tok.Claims); err != nil {
		t.Fatalf("sub-named principal refused: %v", err)
	}
}

func TestMappingClaims(t *testing.T) {
	m := Mapping{Username: "email", Traits: map[string]string{"groups": "groups", "team": "team"}}
	base := func() map[string]any {
		return map[string]any{"email": "a@x", "email_verified": true, "groups": []any{"b", "a", "a"}}
	}
	p, err := m.Principal("user", base())
	if err != nil || strings.Join(p.Traits["groups"], ",") != "a,b" || p.Traits["team"] != nil {
		t.Fatalf("Principal = %+v, %v", p, err)
	}
	for name, edit := range map[string]func(map[string]any){
		"groups not strings":  func(c map[string]any) { c["groups"] = []any{1} },
		"groups an object":    func(c map[string]any) { c["groups"] = map[string]any{} },
		"no username":         func(c map[string]any) { delete(c, "email") },
		"username with colon": func(c map[string]any) { c["email"] = "a:b" },
		"system name":         func(c map[string]any) { c["email"] = "system:admin" },
	} {
		c := base()
		edit(c)
		if _, err := m.Principal("user", c); RuleOf(err) != RuleClaims {
			t.Errorf("%s: err %v, want rule claims", name, err)
		}
	}
}

func TestMappingValidate(t *testing.T) {
	if err := DefaultMapping().Validate("oidc.claims"); err != nil {
		t.Fatal(err)
	}
	err := Mapping{Username: "", Traits: map[string]string{"groups": "", "a:b": "x"}}.Validate("oidc.claims")
	for _, key := range []string{"oidc.claims.username", "oidc.claims.traits.groups", "oidc.claims.traits: trait name"} {
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("Validate error %v does not name %s", err, key)
		}
	}
}

func FuzzClientOf(f *testing.F) {
	for _, s := range []string{`{"aud":"a"}`, `{"aud":["a"]}`, `{"aud":["a","b"],"azp":"b"}`, `{"aud":["a","b"]}`,
		`{"azp":7,"aud":"a"}`, `{"azp":null,"aud":null}`, `[]`, `{"aud":[""]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		client, err := ClientOf(payload)
		if err != nil {
			if RuleOf(err) == "" {
				t.Fatalf("error without a rule: %v", err)
			}
			return
		}
		// An accepted client is never empty and is always one of the
		// audiences, and several audiences are only accepted with azp.
		var c struct {
			AZP any `json:"azp"`
			Aud any `json:"aud"`
		}
		if json.Unmarshal(payload, &c) != nil {
			t.Fatalf("accepted %q that is not JSON", payload)
		}
		auds, _ := StringValues(c.Aud)
		if client == "" || !contains(auds, client) {
			t.Fatalf("client %q not among audiences %q", client, auds)
		}
		if list, ok := c.Aud.([]any); ok && len(list) > 1 && c.AZP != client {
			t.Fatalf("several audiences accepted without azp naming the client: %q", payload)
		}
	})
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// FuzzPrincipal: whatever claims a verified token carries, a principal the
// mapping accepts is valid, and it was accepted only with email_verified
// the boolean true when the token had an email.
func FuzzPrincipal(f *testing.F) {
	for _, s := range []string{`{"email":"a@x","email_verified":true,"groups":["g"]}`, `{"email":"a@x","email_verified":"true"}`,
		`{"email":"a:b","email_verified":true}`, `{"email":"a@x","email_verified":true,"groups":[1]}`, `{"email":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		var claims map[string]any
		if json.Unmarshal(payload, &claims) != nil {
			return
		}
		p, err := DefaultMapping().Principal("user", claims)
		if err != nil {
			if RuleOf(err) == "" {
				t.Fatalf("refusal without a rule: %v", err)
			}
			return
		}
		if verr := p.Validate(); verr != nil {
			t.Fatalf("accepted an invalid principal %+v: %v", p, verr)
		}
		if v, ok := claims["email_verified"].(bool); !ok || !v {
			t.Fatalf("accepted %q without email_verified true", payload)
		}
	})
}

// A claim people or the provider's admins may change (a rename, a new
// nickname) cannot name a principal unless the operator says so: one
// person could otherwise take another's name.
func TestMappingRefusesMutableUsername(t *testing.T) {
	for _, claim := range []string{"preferred_username", "name", "nickname", "given_name", "upn"} {
		err := Mapping{Username: claim}.Validate("oidc.claims")
		if !errors.Is(err, ErrMutableUsername) || !strings.Contains(err.Error(), "oidc.claims.username") {
			t.Errorf("Validate(username %s) = %v, want ErrMutableUsername naming oidc.claims.username", claim, err)
		}
		if err := (Mapping{Username: claim, AllowMutableUsername: true}).Validate("oidc.claims"); err != nil {
			t.Errorf("Validate(username %s, allowed) = %v", claim, err)
		}
	}
	for _, claim := range []string{"email", "sub", "employee_id"} {
		if err := (Mapping{Username: claim}).Validate("oidc.claims"); err != nil {
			t.Errorf("Validate(username %s) = %v", claim, err)
		}
	}
}
