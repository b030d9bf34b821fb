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
type Principal struct {
	Kind   Kind                `json:"kind"`
	Name   string              `json:"name"`
	Traits map[string][]string `json:"traits,omitempty"`
	// ClientID names the application the credential was issued to, if any
	// (DESIGN.md §7). Empty for plain kubectl use.
	ClientID string `json:"client_id,omitempty"`
	// LoginID identifies the login that produced the credential, so that audit
	// can tie every request back to one login.
	LoginID string `json:"login_id,omitempty"`
}

// MaxNameLen bounds principal and trait names.
const MaxNameLen = 253

// Validate reports whether p is well formed: a known kind and a printable name.
func (p Principal) Validate() error {
	if p.Kind != KindUser && p.Kind != KindBot {
		return fmt.Errorf("principal kind %q: must be %q or %q", p.Kind, KindUser, KindBot)
	}
	if err := ValidName(p.Name); err != nil {
		return fmt.Errorf("principal name: %w", err)
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

// String is kind:name, as audit shows it.
func (p Principal) String() string { return string(p.Kind) + ":" + p.Name }

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
