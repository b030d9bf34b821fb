package idp

import (
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// Client is a relying party registered at the test IdP. It is confidential
// (it has a secret), as Limen's proxy is.
type Client struct {
	ID, Secret string
	// Redirects are glob patterns for the redirect URIs, for example
	// "http://127.0.0.1:*/callback" for the CLI's loopback listener.
	Redirects []string
}

func (c *Client) GetID() string                        { return c.ID }
func (c *Client) RedirectURIs() []string               { return nil }
func (c *Client) RedirectURIGlobs() []string           { return c.Redirects }
func (c *Client) PostLogoutRedirectURIs() []string     { return nil }
func (c *Client) PostLogoutRedirectURIGlobs() []string { return nil }
func (c *Client) ApplicationType() op.ApplicationType  { return op.ApplicationTypeWeb }
func (c *Client) AuthMethod() oidc.AuthMethod          { return oidc.AuthMethodBasic }
func (c *Client) ResponseTypes() []oidc.ResponseType {
	return []oidc.ResponseType{oidc.ResponseTypeCode}
}
func (c *Client) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeCode, oidc.GrantTypeDeviceCode}
}
func (c *Client) LoginURL(id string) string            { return pathLogin + "?id=" + id }
func (c *Client) AccessTokenType() op.AccessTokenType  { return op.AccessTokenTypeBearer }
func (c *Client) IDTokenLifetime() time.Duration       { return 5 * time.Minute }
func (c *Client) DevMode() bool                        { return false }
func (c *Client) ClockSkew() time.Duration             { return 0 }
func (c *Client) IsScopeAllowed(scope string) bool     { return scope == "groups" }
func (c *Client) IDTokenUserinfoClaimsAssertion() bool { return true }
func (c *Client) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *Client) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
