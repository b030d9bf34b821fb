package oidc

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/limenhq/limen/gateway/identity"
)

// Mapping turns a verified token's claims into a principal: one claim
// names the person, others become traits that policy decides on.
type Mapping struct {
	// Username is the claim that names the principal ("email" by default).
	Username string `mapstructure:"username" json:"username"`
	// Traits maps a trait name to the claim it is read from, for example
	// {"groups": "groups", "email": "email"}.
	Traits map[string]string `mapstructure:"traits" json:"traits"`
	// AllowMutableUsername lets Username be a claim in MutableClaims. Off,
	// such a mapping is refused (ErrMutableUsername).
	AllowMutableUsername bool `mapstructure:"allow_mutable_username" json:"allow_mutable_username,omitempty"`
}

// MutableClaims are the standard claims a person or the provider's admins
// may change at will (a display name, a nickname, a chosen user name, a
// Microsoft UPN after a rename). One that names principals lets whoever
// renames an account to "bob" become the provider's bob, with bob's
// bindings, sessions and recordings; "email" (with email_verified) and
// "sub" do not change hands that way.
var MutableClaims = []string{"preferred_username", "name", "nickname", "given_name", "family_name", "middle_name",
	"upn", "unique_name"}

// ErrMutableUsername refuses a Username in MutableClaims that the operator
// did not accept (AllowMutableUsername).
var ErrMutableUsername = errors.New("the username claim is one people can change")

// DefaultMapping names people by email and carries the groups claim as the
// groups trait.
func DefaultMapping() Mapping {
	return Mapping{Username: "email", Traits: map[string]string{"groups": "groups", "email": "email"}}
}

// Validate checks the mapping once, at start, so that a typo is an error
// that names its key rather than logins that quietly lack a trait. prefix
// is the configuration key the mapping sits under.
func (m Mapping) Validate(prefix string) error {
	var errs []error
	if err := claimName(m.Username); err != nil {
		errs = append(errs, fmt.Errorf("%s.username: %w", prefix, err))
	}
	if slices.Contains(MutableClaims, m.Username) && !m.AllowMutableUsername {
		errs = append(errs, fmt.Errorf("%s.username %q: %w (a rename would hand one person another's name): name people by \"email\" or \"sub\", or accept it with %s.allow_mutable_username",
			prefix, m.Username, ErrMutableUsername, prefix))
	}
	for _, trait := range sortedKeys(m.Traits) {
		if err := identity.ValidName(trait); err != nil {
			errs = append(errs, fmt.Errorf("%s.traits: trait name %w", prefix, err))
		}
		if err := claimName(m.Traits[trait]); err != nil {
			errs = append(errs, fmt.Errorf("%s.traits.%s: %w", prefix, trait, err))
		}
	}
	return errors.Join(errs...)
}

func claimName(c string) error {
	switch {
	case c == "":
		return errors.New("names no claim")
	case len(c) > 128 || strings.ContainsAny(c, " \t\r\n"):
		return fmt.Errorf("claim %q is too long or contains white space", c)
	}
	return nil
}

// usesEmail reports whether the email claim is identity under m: it names
// the principal or becomes a trait policy can bind roles to.
func (m Mapping) usesEmail() bool {
	if m.Username == "email" {
		return true
	}
	for _, c := range m.Traits {
		if c == "email" {
			return true
		}
	}
	return false
}

// Principal maps verified claims to a principal of kind.
func (m Mapping) Principal(kind identity.Kind, claims map[string]any) (identity.Principal, error) {
	if m.usesEmail() {
		if _, has := claims["email"]; has {
			if v, ok := claims["email_verified"].(bool); !ok || !v {
				return identity.Principal{}, refuse(RuleEmailVerified,
					"email is identity here, so email_verified must be the boolean true; the token has %s", describe(claims["email_verified"]))
			}
		}
	}
	name, ok := claims[m.Username].(string)
	if !ok || name == "" {
		return identity.Principal{}, refuse(RuleClaims, "the username claim %q must be a non-empty string; the token has %s",
			m.Username, describe(claims[m.Username]))
	}
	if err := identity.ValidName(name); err != nil {
		return identity.Principal{}, refuse(RuleClaims, "claim %q cannot name a Limen principal: %v", m.Username, err)
	}
	p := identity.Principal{Kind: kind, Name: name}
	for _, trait := range sortedKeys(m.Traits) {
		vals, err := StringValues(claims[m.Traits[trait]])
		if err != nil {
			return identity.Principal{}, refuse(RuleClaims, "claim %q (trait %s): %v", m.Traits[trait], trait, err)
		}
		if len(vals) == 0 {
			continue
		}
		if p.Traits == nil {
			p.Traits = map[string][]string{}
		}
		p.Traits[trait] = vals
	}
	if err := p.Validate(); err != nil {
		return identity.Principal{}, refuse(RuleClaims, "%v", err)
	}
	return p, nil
}

// StringValues reads a claim as a list of strings: absent is none, a
// string is one, a list must hold only strings. Anything else is an error,
// never a guess.
func StringValues(v any) ([]string, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case string:
		return []string{v}, nil
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("a list element is %s, want a string", describe(e))
			}
			out = append(out, s)
		}
		slices.Sort(out)
		return slices.Compact(out), nil
	default:
		return nil, fmt.Errorf("the value is %s, want a string or a list of strings", describe(v))
	}
}

func describe(v any) string {
	switch v := v.(type) {
	case nil:
		return "no value"
	case string:
		return fmt.Sprintf("the string %q", v)
	case bool:
		return fmt.Sprintf("the boolean %t", v)
	case float64:
		return fmt.Sprintf("the number %v", v)
	default:
		return fmt.Sprintf("a %T", v)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
