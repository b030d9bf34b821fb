package main

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/limenhq/limen/gateway/bots"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/oidc"
	"github.com/limenhq/limen/gateway/proxy"
)

// addIdentityFlags adds the proxy's OIDC sign-in and CI issuer flags.
func addIdentityFlags(f *pflag.FlagSet) {
	f.String("oidc-issuer", "", "OpenID Connect issuer URL that people sign in through (limen login --oidc); empty: local users only")
	f.String("oidc-client-id", "", "this proxy's client ID at --oidc-issuer")
	f.String("oidc-client-secret-file", "", "file holding the client secret for --oidc-client-id")
	f.String("oidc-issuer-name", oidc.DefaultIssuerName, "the name of --oidc-issuer in Limen: its people are ISSUER:person (user:oidc:alice@example.com), never the local user of the same name, and policy binds them under data.limen.config.bindings.issuers.ISSUER")
	f.String("oidc-username-claim", "email", "ID token claim that names a person (email needs email_verified: true); a claim people can change (preferred_username, name, nickname, ...) needs --oidc-username-claim-allow-mutable")
	f.Bool("oidc-username-claim-allow-mutable", false, "accept an --oidc-username-claim that people or the provider's admins can change (preferred_username, name, nickname, ...): a rename then hands one person another's name at this provider")
	f.StringSlice("oidc-trait", []string{"groups=groups", "email=email"},
		"TRAIT=CLAIM: an ID token claim (a string or a list of strings) that becomes a trait policy decides on (repeatable)")
	f.StringSlice("oidc-scope", []string{"profile", "email", "groups"}, "scopes asked for besides openid")
	f.StringSlice("ci-issuer", nil, "NAME=URL: a CI system whose workload ID tokens may log bots in (repeatable); policy data names it NAME and matches its tokens' claims to bots (data.limen.config.bots)")
	f.StringSlice("ci-issuer-kind", nil, "NAME=KIND: which CI system --ci-issuer NAME is (github, gitlab or generic), so that policy knows which claims pin a token to one owner; needed for any issuer but GitHub's and gitlab.com's public ones (repeatable)")
	f.String("ci-audience", "limen", "the audience (client) CI workload tokens must be issued to")
}

// loadIdentity reads and checks the identity flags; every error names its
// key.
func loadIdentity(v *viper.Viper) (*oidc.ProviderConfig, []proxy.CIIssuer, error) {
	var cis []proxy.CIIssuer
	aud := v.GetString("ci-audience")
	names := map[string]bool{}
	kinds := map[string]bots.CIKind{}
	for _, spec := range v.GetStringSlice("ci-issuer-kind") {
		name, k, ok := strings.Cut(spec, "=")
		kind, err := bots.ParseCIKind(k)
		if !ok || err != nil || kinds[name] != "" {
			return nil, nil, fmt.Errorf("ci-issuer-kind %q: want NAME=KIND once per issuer, KIND github, gitlab or generic, for example ci=github", spec)
		}
		kinds[name] = kind
	}
	for _, spec := range v.GetStringSlice("ci-issuer") {
		name, iss, ok := strings.Cut(spec, "=")
		if !ok || identity.ValidName(name) != nil || names[name] {
			return nil, nil, fmt.Errorf("ci-issuer %q: want NAME=URL with a unique name, for example github=https://token.actions.githubusercontent.com", spec)
		}
		if err := issuerURL(iss); err != nil {
			return nil, nil, fmt.Errorf("ci-issuer %q: %w", spec, err)
		}
		if aud == "" {
			return nil, nil, errors.New("ci-audience: required with --ci-issuer")
		}
		names[name] = true
		kind, known := bots.KindOfIssuer(iss)
		if k := kinds[name]; k != "" {
			kind = k
		} else if !known {
			return nil, nil, fmt.Errorf("ci-issuer %q: which CI system is %s? Say so with ci-issuer-kind %s=github, gitlab or generic (policy needs it to know which claims pin a token to one owner)", spec, iss, name)
		}
		cis = append(cis, proxy.CIIssuer{Name: name, Kind: kind, Issuer: iss, Audience: aud})
	}
	for name := range kinds {
		if !names[name] {
			return nil, nil, fmt.Errorf("ci-issuer-kind %s: no --ci-issuer is named %s", name, name)
		}
	}
	issuer := v.GetString("oidc-issuer")
	if issuer == "" {
		for _, k := range []string{"oidc-client-id", "oidc-client-secret-file"} {
			if v.GetString(k) != "" {
				return nil, nil, fmt.Errorf("%s: set without --oidc-issuer", k)
			}
		}
		return nil, cis, nil
	}
	if err := issuerURL(issuer); err != nil {
		return nil, nil, fmt.Errorf("oidc-issuer %q: %w", issuer, err)
	}
	pc := &oidc.ProviderConfig{Issuer: issuer, ClientID: v.GetString("oidc-client-id"), Scopes: v.GetStringSlice("oidc-scope")}
	if pc.ClientID == "" {
		return nil, nil, errors.New("oidc-client-id: required with --oidc-issuer")
	}
	secretFile := v.GetString("oidc-client-secret-file")
	if secretFile == "" {
		return nil, nil, errors.New("oidc-client-secret-file: required with --oidc-issuer")
	}
	secret, err := os.ReadFile(secretFile)
	if err != nil {
		return nil, nil, fmt.Errorf("oidc-client-secret-file: %w", err)
	}
	if pc.ClientSecret = strings.TrimSpace(string(secret)); pc.ClientSecret == "" {
		return nil, nil, fmt.Errorf("oidc-client-secret-file %s: the file is empty", secretFile)
	}
	pc.Name = v.GetString("oidc-issuer-name")
	if err := identity.ValidIssuer(pc.Name); err != nil {
		return nil, nil, fmt.Errorf("oidc-issuer-name: %w", err)
	}
	pc.Mapping = oidc.Mapping{Username: v.GetString("oidc-username-claim"), Traits: map[string]string{},
		AllowMutableUsername: v.GetBool("oidc-username-claim-allow-mutable")}
	if pc.Mapping.Username == "" {
		return nil, nil, errors.New("oidc-username-claim: names no claim")
	}
	if slices.Contains(oidc.MutableClaims, pc.Mapping.Username) && !pc.Mapping.AllowMutableUsername {
		return nil, nil, fmt.Errorf("oidc-username-claim %q: people or the provider's admins can change this claim, so a rename would hand one person another's name, bindings and recordings; "+
			"name people by email (with email_verified) or sub, or accept the risk with oidc-username-claim-allow-mutable: true", pc.Mapping.Username)
	}
	for _, spec := range v.GetStringSlice("oidc-trait") {
		trait, claim, ok := strings.Cut(spec, "=")
		if !ok || claim == "" {
			return nil, nil, fmt.Errorf("oidc-trait %q: want TRAIT=CLAIM, for example groups=groups", spec)
		}
		if err := identity.ValidName(trait); err != nil {
			return nil, nil, fmt.Errorf("oidc-trait %q: trait name %w", spec, err)
		}
		if _, dup := pc.Mapping.Traits[trait]; dup {
			return nil, nil, fmt.Errorf("oidc-trait %q: trait %s is mapped twice", spec, trait)
		}
		pc.Mapping.Traits[trait] = claim
	}
	if err := pc.Mapping.Validate("oidc"); err != nil {
		return nil, nil, err
	}
	return pc, cis, nil
}

// issuerURL checks an issuer: https, or http on a loopback address (a
// local test provider).
func issuerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return errors.New("want an absolute URL such as https://login.example.com")
	}
	if u.Scheme == "https" {
		return nil
	}
	if h := u.Hostname(); u.Scheme == "http" && (h == "127.0.0.1" || h == "::1" || h == "localhost") {
		return nil
	}
	return errors.New("the issuer must be https (http only on a loopback address, for tests)")
}
