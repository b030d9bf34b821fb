// Package identity defines who is making a request: the Principal that the
// proxy's CA writes into client certificates, that policy decides on, and that
// grants and audit events carry.
package identity

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// Kind says whether a principal is a person or an automated client.
type Kind string

// The principal kinds Limen knows.
const (
	KindUser Kind = "user"
	KindBot  Kind = "bot"
)

// Principal is an authenticated caller. Traits are attributes from the
// identity source (for example an IdP's groups), keyed by trait name.
//
// A principal is named by Kind, Issuer and Name together (Same): Name alone
// is only what its source calls it, and two sources may use the same word
// for two people (DESIGN.md §2).
type Principal struct {
	Kind Kind   `json:"kind"`
	Name string `json:"name"`
	// Issuer is the principal's provenance: empty for Limen's own
	// directory (local users and every bot), otherwise the name the proxy
	// gives the identity provider that vouched for it (--oidc-issuer-name,
	// ValidIssuer). Local bob and the provider's bob are two principals:
	// they never share policy bindings, locks, sessions, recordings or a
	// Kubernetes user name.
	Issuer string              `json:"issuer,omitempty"`
	Traits map[string][]string `json:"traits,omitempty"`
	// ClientID names the one client the credential was issued to (DESIGN.md
	// §7): ClientKubectl, ClientConsole or an application registered in
	// policy. A credential with none, or with a malformed one, gets nothing
	// (ValidClient); there is no fallback to kubectl.
	ClientID string `json:"client_id,omitempty"`
	// LoginID identifies the login that produced the credential, so that audit
	// can tie every request back to one login.
	LoginID string `json:"login_id,omitempty"`
	// Requests are the approved access requests the credential carries
	// (Elevation); Same ignores them, as it ignores traits.
	Requests []Elevation `json:"requests,omitempty"`
}

// MaxNameLen bounds principal and trait names.
const MaxNameLen = 253

// Validate reports whether p is well formed: a known kind, a printable
// name and, when set, a well-formed issuer. Bots are Limen's own (an
// identity provider's token may log a bot in, but the bot is the one in
// Limen's directory), so a bot has no issuer.
func (p Principal) Validate() error {
	if p.Kind != KindUser && p.Kind != KindBot {
		return fmt.Errorf("principal kind %q: must be %q or %q", p.Kind, KindUser, KindBot)
	}
	if err := ValidName(p.Name); err != nil {
		return fmt.Errorf("principal name: %w", err)
	}
	if p.Issuer != "" {
		if p.Kind == KindBot {
			return fmt.Errorf("bot %q has issuer %q: bots are local", p.Name, p.Issuer)
		}
		if err := ValidIssuer(p.Issuer); err != nil {
			return fmt.Errorf("principal issuer: %w", err)
		}
	}
	if len(p.Requests) > MaxElevations {
		return fmt.Errorf("principal carries %d access requests, at most %d are allowed", len(p.Requests), MaxElevations)
	}
	for _, e := range p.Requests {
		if err := e.Validate(); err != nil {
			return err
		}
	}
	for k, vs := range p.Traits {
		if err := ValidName(k); err != nil {
			return fmt.Errorf("trait name: %w", err)
		}
		for _, v := range vs {
			if len(v) > MaxNameLen || !printable(v) {
				return fmt.Errorf("trait %s: value %q is empty, too long or not printable", k, v)
			}
		}
	}
	return nil
}

// String is kind:name for a local principal and kind:issuer:name for one
// from an identity provider, as audit, locks and status show it: user:bob
// and user:corp:bob are two people. Names cannot contain a colon, so the
// two forms never meet and ParsePrincipal reads either back.
func (p Principal) String() string { return string(p.Kind) + ":" + p.QualifiedName() }

// QualifiedName is the name with its provenance: name for a local
// principal, issuer:name for one from an identity provider. It is unique
// across sources within a kind.
func (p Principal) QualifiedName() string {
	if p.Issuer == "" {
		return p.Name
	}
	return p.Issuer + ":" + p.Name
}

// Same reports whether p and q are the same principal: same kind, same
// provenance, same name. Traits, client and login play no part.
func (p Principal) Same(q Principal) bool {
	return p.Kind == q.Kind && p.Name == q.Name && p.Issuer == q.Issuer
}

// ProvenanceLocal is how a principal with no issuer is shown: one of
// Limen's own users or bots.
const ProvenanceLocal = "local"

// Provenance is where the principal comes from, for display: "local" or
// the issuer's name.
func (p Principal) Provenance() string {
	if p.Issuer == "" {
		return ProvenanceLocal
	}
	return p.Issuer
}

// ParsePrincipal reads what String writes, plus a bare NAME (a local
// user): "user:bob", "bot:ci", "user:corp:bob". Only kind, issuer and name
// are set.
func ParsePrincipal(s string) (Principal, error) {
	p := Principal{Kind: KindUser, Name: s}
	if k, rest, ok := strings.Cut(s, ":"); ok {
		p = Principal{Kind: Kind(k), Name: rest}
		if iss, name, ok := strings.Cut(rest, ":"); ok {
			if iss == "" {
				return Principal{}, fmt.Errorf("%q: an empty issuer is not a local principal: write user:NAME", printableOrQuoted(s))
			}
			p.Issuer, p.Name = iss, name
		}
	}
	if err := p.Validate(); err != nil {
		return Principal{}, fmt.Errorf("%q: want NAME, user:NAME, bot:NAME or user:ISSUER:NAME: %w", printableOrQuoted(s), err)
	}
	return p, nil
}

// MaxIssuerLen bounds an issuer name: a DNS label.
const MaxIssuerLen = 63

// ValidIssuer checks the name an identity provider is known by: 1–63
// lower-case letters, digits and inner hyphens, and none of the words that
// would make a qualified name read as something else ("local", "bot",
// "user", or a "system" prefix, which Kubernetes reserves).
func ValidIssuer(s string) error {
	if ValidClient(s) != nil { // the same shape as a client name
		return fmt.Errorf("issuer name %q: want 1–%d lower-case letters, digits and inner hyphens", printableOrQuoted(s), MaxIssuerLen)
	}
	switch {
	case s == ProvenanceLocal || s == string(KindBot) || s == string(KindUser):
		return fmt.Errorf("issuer name %q is reserved: choose another (for example the provider's company or product name)", s)
	case strings.HasPrefix(s, "system"):
		return fmt.Errorf("issuer name %q: names starting with \"system\" are reserved for Kubernetes", s)
	}
	return nil
}

// ValidName checks a user, bot or trait name: 1–253 printable characters, no
// white space, no colon (it separates kind from name), and no "system:" prefix.
func ValidName(s string) error {
	switch {
	case s == "":
		return errors.New("empty")
	case len(s) > MaxNameLen:
		return fmt.Errorf("%q is longer than %d bytes", s[:32]+"…", MaxNameLen)
	case strings.HasPrefix(s, "system"):
		return fmt.Errorf("%q: names starting with \"system\" are reserved for Kubernetes", s)
	case strings.ContainsAny(s, ": \t\r\n"):
		return fmt.Errorf("%q contains a colon or white space", s)
	case !printable(s):
		return fmt.Errorf("%q contains a control or non-printable character", s)
	}
	return nil
}

func printable(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// The clients Limen itself issues credentials to. Every other client is an
// application registered in policy data (data.limen.config.clients).
const (
	// ClientKubectl is the command line: limen login and limen kube login.
	ClientKubectl = "kubectl"
	// ClientConsole is Limen's web console.
	ClientConsole = "console"
)

// MaxClientLen bounds a client name: a DNS label, so that it fits wherever
// a name of a Kubernetes object would.
const MaxClientLen = 63

// ValidClient checks a credential's client name: 1–63 lower-case letters,
// digits and inner hyphens, exactly one name. There is no default: an empty
// name is an error, never "kubectl", and a spelling that might be read as
// two names or as another name ("a,b", " kubectl", "Kubectl") is refused
// rather than interpreted, since a wrong guess hands out another client's
// groups.
func ValidClient(s string) error {
	switch {
	case s == "":
		return errors.New("the credential names no client")
	case len(s) > MaxClientLen:
		return fmt.Errorf("client name is longer than %d bytes", MaxClientLen)
	case s[0] == '-' || s[len(s)-1] == '-':
		return fmt.Errorf("client name %q starts or ends with a hyphen", s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return fmt.Errorf("client name %q: only lower-case letters, digits and hyphens name one client", printableOrQuoted(s))
		}
	}
	return nil
}

func printableOrQuoted(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	return strings.ToValidUTF8(s, "?")
}
