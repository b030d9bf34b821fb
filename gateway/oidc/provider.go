package oidc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/limenhq/limen/gateway/identity"
)

// ProviderConfig configures sign-in through one OpenID Connect provider.
type ProviderConfig struct {
	Issuer string
	// Name is the provider's name in Limen, the provenance of everyone it
	// signs in (identity.Principal.Issuer, identity.ValidIssuer): policy
	// binds its people under data.limen.config.bindings.issuers.NAME, and
	// they are NAME:person to audit, locks and Kubernetes. Empty is
	// DefaultIssuerName.
	Name         string
	ClientID     string
	ClientSecret string
	// Scopes beyond "openid"; nil asks for "profile", "email" and "groups".
	Scopes  []string
	Mapping Mapping
	// HTTPClient reaches the provider; nil is http.DefaultClient.
	HTTPClient *http.Client
}

// DefaultIssuerName is the name of a provider configured without one.
const DefaultIssuerName = "oidc"

// Provider signs people in through one OpenID Connect provider. The proxy
// holds the client secret, so the code exchange and the device polling
// happen here, never on the user's machine.
type Provider struct {
	oauth    oauth2.Config
	verifier *Verifier
	mapping  Mapping
	hc       *http.Client
	issuer   string
	name     string
}

// NewProvider discovers cfg.Issuer and checks the mapping.
func NewProvider(ctx context.Context, cfg ProviderConfig) (*Provider, error) {
	if cfg.ClientID == "" {
		return nil, errors.New("oidc: a client ID is required (--oidc-client-id)")
	}
	if err := cfg.Mapping.Validate("oidc.claims"); err != nil {
		return nil, err
	}
	name := cfg.Name
	if name == "" {
		name = DefaultIssuerName
	}
	if err := identity.ValidIssuer(name); err != nil {
		return nil, fmt.Errorf("oidc: %w", err)
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	dp, v, err := discover(ctx, cfg.Issuer, cfg.ClientID, hc)
	if err != nil {
		return nil, err
	}
	scopes := cfg.Scopes
	if scopes == nil {
		scopes = []string{"profile", "email", "groups"}
	}
	return &Provider{
		oauth: oauth2.Config{ClientID: cfg.ClientID, ClientSecret: cfg.ClientSecret, Endpoint: dp.Endpoint(),
			Scopes: append([]string{oidc.ScopeOpenID}, scopes...)},
		verifier: v, mapping: cfg.Mapping, hc: hc, issuer: cfg.Issuer, name: name,
	}, nil
}

// Issuer is the provider's issuer URL.
func (p *Provider) Issuer() string { return p.issuer }

// Name is the provider's name in Limen: the Issuer of its principals.
func (p *Provider) Name() string { return p.name }

func (p *Provider) ctx(ctx context.Context) context.Context {
	return context.WithValue(ctx, oauth2.HTTPClient, p.hc)
}

// Flow is the code flow for one redirect URL: the CLI's loopback address
// or the console's callback.
type Flow struct {
	p   *Provider
	cfg oauth2.Config
}

// Flow returns the code flow that redirects to redirectURL.
func (p *Provider) Flow(redirectURL string) Flow {
	cfg := p.oauth
	cfg.RedirectURL = redirectURL
	return Flow{p: p, cfg: cfg}
}

// AuthCodeURL is where to send the browser. state protects the redirect
// (the caller checks it), nonce binds the ID token to this login, and the
// PKCE verifier's S256 challenge binds the code to whoever holds verifier.
func (f Flow) AuthCodeURL(state, nonce, verifier string) string {
	return f.AuthCodeURLChallenge(state, nonce, oauth2.S256ChallengeFromVerifier(verifier))
}

// AuthCodeURLChallenge is AuthCodeURL for a caller that holds the PKCE
// verifier elsewhere (the CLI) and passes only its S256 challenge.
func (f Flow) AuthCodeURLChallenge(state, nonce, challenge string) string {
	return f.cfg.AuthCodeURL(state, oidc.Nonce(nonce),
		oauth2.SetAuthURLParam("code_challenge", challenge), oauth2.SetAuthURLParam("code_challenge_method", "S256"))
}

// Exchange redeems code with the PKCE verifier and maps the verified ID
// token, which must carry nonce, to a user principal.
func (f Flow) Exchange(ctx context.Context, code, verifier, nonce string) (identity.Principal, error) {
	if nonce == "" || verifier == "" {
		return identity.Principal{}, errors.New("oidc: the code flow needs a nonce and a PKCE verifier")
	}
	tok, err := f.cfg.Exchange(f.p.ctx(ctx), code, oauth2.VerifierOption(verifier))
	if err != nil {
		return identity.Principal{}, fmt.Errorf("oidc: the provider refused the code: %w", err)
	}
	return f.p.principal(ctx, tok, nonce)
}

func (p *Provider) principal(ctx context.Context, tok *oauth2.Token, nonce string) (identity.Principal, error) {
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return identity.Principal{}, errors.New("oidc: the provider's answer has no ID token: is the openid scope allowed for this client?")
	}
	t, err := p.verifier.Verify(p.ctx(ctx), raw, nonce)
	if err != nil {
		return identity.Principal{}, err
	}
	pr, err := p.mapping.Principal(identity.KindUser, t.Claims)
	if err != nil {
		return identity.Principal{}, err
	}
	// The provider's people are its own: never Limen's local users of the
	// same name (DESIGN.md §2).
	pr.Issuer = p.name
	return pr, nil
}

// DeviceAuth starts a device authorization grant.
func (p *Provider) DeviceAuth(ctx context.Context) (*oauth2.DeviceAuthResponse, error) {
	da, err := p.oauth.DeviceAuth(p.ctx(ctx))
	if err != nil {
		return nil, fmt.Errorf("oidc: start device authorization: %w", err)
	}
	return da, nil
}

// ErrPending means the user has not approved the device code yet.
var ErrPending = errors.New("authorization pending: approve the code in the browser")

// DeviceToken waits, until ctx ends, for the user to approve the device
// code, then maps the ID token. When ctx ends first it returns ErrPending,
// so the caller can ask again.
func (p *Provider) DeviceToken(ctx context.Context, deviceCode string, interval time.Duration) (identity.Principal, error) {
	da := &oauth2.DeviceAuthResponse{DeviceCode: deviceCode, Interval: int64(interval / time.Second)}
	tok, err := p.oauth.DeviceAccessToken(p.ctx(ctx), da)
	if err != nil {
		if ctx.Err() != nil {
			return identity.Principal{}, ErrPending
		}
		return identity.Principal{}, fmt.Errorf("oidc: device authorization failed: %w", err)
	}
	return p.principal(ctx, tok, "")
}

// Discover builds a Verifier for issuer's tokens issued to clientID, with
// keys from the issuer's JWKS; for CI workload tokens, which come from a
// provider Limen never runs a flow with.
func Discover(ctx context.Context, issuer, clientID string, hc *http.Client) (*Verifier, error) {
	_, v, err := discover(ctx, issuer, clientID, hc)
	return v, err
}

func discover(ctx context.Context, issuer, clientID string, hc *http.Client) (*oidc.Provider, *Verifier, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	dp, err := oidc.NewProvider(oidc.ClientContext(ctx, hc), issuer)
	if err != nil {
		return nil, nil, fmt.Errorf("oidc: discover issuer %s: %w", issuer, err)
	}
	var meta struct {
		JWKS string   `json:"jwks_uri"`
		Algs []string `json:"id_token_signing_alg_values_supported"`
	}
	if err := dp.Claims(&meta); err != nil || meta.JWKS == "" {
		return nil, nil, fmt.Errorf("oidc: issuer %s: discovery document has no jwks_uri", issuer)
	}
	// The key set outlives ctx (it refetches keys on rotation), so it gets
	// a background context carrying only the HTTP client.
	keys := oidc.NewRemoteKeySet(oidc.ClientContext(context.Background(), hc), meta.JWKS)
	v, err := NewVerifier(issuer, clientID, keys, meta.Algs, nil)
	return dp, v, err
}
