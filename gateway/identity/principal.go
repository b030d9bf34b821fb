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
	// ClientID names the one client the credential was issued to (DESIGN.md
	// §7): ClientKubectl, ClientConsole or an application registered in
	// policy. A credential with none, or with a malformed one, gets nothing
	// (ValidClient); there is no fallback to kubectl.
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
