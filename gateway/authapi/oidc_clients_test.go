package authapi_test

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/authapi"
	"github.com/limenhq/limen/gateway/oidc"
	"github.com/limenhq/limen/test/idp"
)

// TestOIDCClientRulesThroughTheLoginHandlers: ID tokens signed by the test
// IdP with the key its JWKS publishes, but naming their client wrongly, are
// refused by every login handler that takes one — a person's code flow and
// device flow, and a bot's CI token — with a 401 that names the rule, and
// each refusal is audited. The IdP issues each token as it would (azp and
// aud the client "limen") and the test reshapes its claims before it is
// signed (idp.IdP.ReshapeIDTokens); a CI token is minted with them.
func TestOIDCClientRulesThroughTheLoginHandlers(t *testing.T) {
	e := startOIDCAPI(t)
	e.idp.AddUser(idp.User{Email: "carol@example.com", Password: "pw", Groups: []string{"dev"}})
	null := json.RawMessage("null")
	set := func(kv map[string]any) func(map[string]any) {
		return func(c map[string]any) {
			delete(c, "azp") // the IdP sets azp to the client; a case that wants one sets it
			maps.Copy(c, kv)
		}
	}
	cases := []struct {
		name    string
		reshape func(map[string]any)
		rule    oidc.Rule
	}{
		{"azp a list", set(map[string]any{"azp": []string{"limen"}}), oidc.RuleAZP},
		{"azp a number", set(map[string]any{"azp": 42}), oidc.RuleAZP},
		{"azp null", set(map[string]any{"azp": null}), oidc.RuleAZP},
		{"azp another client", set(map[string]any{"azp": "other", "aud": []string{"limen", "other"}}), oidc.RuleClient},
		{"azp not an audience", set(map[string]any{"azp": "limen", "aud": []string{"other"}}), oidc.RuleAZP},
		{"two audiences without azp", set(map[string]any{"aud": []string{"limen", "other"}}), oidc.RuleAudience},
		{"two audiences without azp, the other first", set(map[string]any{"aud": []string{"other", "limen"}}), oidc.RuleAudience},
		{"another client's audience", set(map[string]any{"aud": "other"}), oidc.RuleClient},
	}
	logins := []struct {
		name  string
		login func(t *testing.T, reshape func(map[string]any)) error
	}{
		{"code flow", func(t *testing.T, reshape func(map[string]any)) error {
			e.idp.ReshapeIDTokens(reshape)
			defer e.idp.ReshapeIDTokens(nil)
			_, err := e.signIn(t, "carol@example.com")
			return err
		}},
		{"device flow", func(t *testing.T, reshape func(map[string]any)) error {
			e.idp.ReshapeIDTokens(reshape)
			defer e.idp.ReshapeIDTokens(nil)
			_, err := e.deviceSignIn(t, "carol@example.com")
			return err
		}},
		{"bot CI token", func(t *testing.T, reshape func(map[string]any)) error {
			claims := map[string]any{"aud": "limen", "repository_owner_id": "1000001", "repository": "limenhq/demo", "ref": "refs/heads/main"}
			reshape(claims)
			tok, err := e.idp.WorkloadToken("limen", "repo:limenhq/demo:ref:refs/heads/main", claims, 5*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			_, err = e.login(t, func(ctx context.Context, c *authapi.Client, csr, ttl string) (authapi.LoginResponse, error) {
				return c.BotOIDCLogin(ctx, authapi.BotOIDCLoginRequest{Bot: "ci-deployer", IDToken: tok, CSR: csr, TTL: ttl})
			})
			return err
		}},
	}
	denied := func() int {
		evs, err := e.store.Search(context.Background(), audit.Query{Type: audit.TypeAuthDenied})
		if err != nil {
			t.Fatal(err)
		}
		return len(evs)
	}
	for _, l := range logins {
		t.Run(l.name, func(t *testing.T) {
			// The same login with the token as the IdP issued it passes:
			// what a case refuses is its change alone.
			if err := l.login(t, func(map[string]any) {}); err != nil {
				t.Fatalf("the token as issued: %v", err)
			}
			for _, tc := range cases {
				before := denied()
				err := l.login(t, tc.reshape)
				if err == nil || !strings.Contains(err.Error(), "(rule "+string(tc.rule)+")") || !strings.Contains(err.Error(), "401") {
					t.Errorf("%s: %v; want a 401 naming rule %s", tc.name, err, tc.rule)
					continue
				}
				evs, err := e.store.Search(context.Background(), audit.Query{Type: audit.TypeAuthDenied, Limit: 1})
				if err != nil || denied() != before+1 || !strings.Contains(evs[len(evs)-1].Denied.Reason, "(rule "+string(tc.rule)+")") {
					t.Errorf("%s: the refusal is not audited with its rule (%v)", tc.name, err)
				}
			}
		})
	}
}

// deviceSignIn signs email in with the device flow: the API starts it, the
// user approves the code at the IdP, the API's token call returns the
// login.
func (e *oidcAPI) deviceSignIn(t *testing.T, email string) (*authapi.LoginResponse, error) {
	return e.login(t, func(ctx context.Context, c *authapi.Client, csr, ttl string) (authapi.LoginResponse, error) {
		da, err := c.OIDCDevice(ctx)
		if err != nil {
			return authapi.LoginResponse{}, err
		}
		if err := e.idp.ApproveDevice(da.UserCode, email, "pw"); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
			resp, err := c.OIDCDeviceToken(ctx, authapi.DeviceTokenRequest{DeviceCode: da.DeviceCode, Interval: 1, CSR: csr, TTL: ttl})
			if err != nil {
				return authapi.LoginResponse{}, err
			}
			if !resp.Pending {
				return *resp.Login, nil
			}
		}
		t.Fatal("the device login stayed pending")
		return authapi.LoginResponse{}, nil
	})
}
