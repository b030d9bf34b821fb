package impersonate

import (
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/limenhq/limen/gateway/identity"
)

// Config is how the worker presents an admitted principal to the API
// server: the Kubernetes user name it impersonates, and the RBAC variant
// the cluster grants the worker (which decides the key the session id
// travels under). The zero value is the default: bare user names, legacy
// impersonation.
type Config struct {
	// UserPrefix goes before every Kubernetes user name Limen impersonates
	// (--kube-user-prefix), so that a Limen user can be told apart from a
	// cluster user of the same name. Check it with ValidateUserPrefix.
	UserPrefix string
	// Mode is the worker RBAC variant of deploy/kube the cluster grants.
	Mode Mode
}

// Mode is the kind of impersonation the worker's ServiceAccount is granted.
type Mode string

// The worker RBAC variants (deploy/kube).
const (
	// ModeLegacy: worker-rbac.yaml, the "impersonate" verb on users, the
	// limen groups and the session extra.
	ModeLegacy Mode = "legacy"
	// ModeConstrained: worker-rbac-constrained.yaml, Kubernetes 1.36+
	// constrained impersonation: "impersonate:user-info" on the same, plus
	// "impersonate-on:user-info:VERB" on the resources an operator lists.
	ModeConstrained Mode = "constrained"
)

// Session extra keys, as the cluster sees them (kubectl auth whoami, the
// cluster's audit log). Constrained impersonation accepts only extra keys
// that are domain-prefixed paths ("acme.io/foo"), so "limen-session"
// cannot be impersonated under it at all; the legacy variant keeps the
// key Limen has always sent.
const (
	SessionExtraLegacy      = "limen-session"
	SessionExtraConstrained = "limenhq.github.io/session"
)

// The header names that carry the session extra: the key, lower-case, with
// its slash percent-encoded as the API server's header parsing expects.
const (
	headerSessionLegacy      = "Impersonate-Extra-Limen-Session"
	headerSessionConstrained = "Impersonate-Extra-Limenhq.github.io%2fsession"
)

// ParseMode reads a Mode; "" is ModeLegacy.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", ModeLegacy:
		return ModeLegacy, nil
	case ModeConstrained:
		return ModeConstrained, nil
	}
	return "", fmt.Errorf("%q is not an impersonation mode: want %q (deploy/kube/worker-rbac.yaml) or %q (deploy/kube/worker-rbac-constrained.yaml)",
		s, ModeLegacy, ModeConstrained)
}

// SessionExtra is the user-extra key the session id is impersonated under.
func (c Config) SessionExtra() string {
	if c.Mode == ModeConstrained {
		return SessionExtraConstrained
	}
	return SessionExtraLegacy
}

func (c Config) sessionHeader() string {
	if c.Mode == ModeConstrained {
		return headerSessionConstrained
	}
	return headerSessionLegacy
}

// Validate checks the prefix and the mode.
func (c Config) Validate() error {
	if err := ValidateUserPrefix(c.UserPrefix); err != nil {
		return err
	}
	_, err := ParseMode(string(c.Mode))
	return err
}

// BotPrefix is what a bot's Kubernetes user name carries after the
// configured prefix. User names cannot contain a colon (identity.ValidName),
// so no user ever maps to a bot's name, whatever the prefix.
const BotPrefix = "bot:"

// MaxUserPrefixLen bounds --kube-user-prefix.
const MaxUserPrefixLen = 64

// ErrReservedPrefix refuses a user prefix under which a Limen name would
// land among names Kubernetes or Limen reserve.
var ErrReservedPrefix = errors.New("reserved")

// ValidateUserPrefix checks a --kube-user-prefix: empty, or at most
// MaxUserPrefixLen printable characters without white space. It refuses a
// prefix starting with "system:", under which every Limen user would become
// a name Kubernetes reserves for itself (its components, nodes and
// ServiceAccounts hold RBAC as system: users), and one starting with "bot:",
// under which users would take the names bots have on a worker with no
// prefix.
func ValidateUserPrefix(p string) error {
	switch {
	case p == "":
		return nil
	case len(p) > MaxUserPrefixLen:
		return fmt.Errorf("%q is longer than %d bytes", p, MaxUserPrefixLen)
	case strings.HasPrefix(p, "system:"):
		return fmt.Errorf("%q: %w: Kubernetes user names starting with \"system:\" belong to the cluster's own components", p, ErrReservedPrefix)
	case strings.HasPrefix(p, BotPrefix):
		return fmt.Errorf("%q: %w: Kubernetes user names starting with %q are Limen's bots", p, ErrReservedPrefix, BotPrefix)
	}
	for _, r := range p {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return fmt.Errorf("%q contains white space, a control or a non-printable character", p)
		}
	}
	return nil
}

// User is the Kubernetes user name p is impersonated as: the prefix, then
// the name for a local user, issuer:name for an identity provider's user
// (identity.Principal.QualifiedName), or "bot:" and the name for a bot. A
// principal whose kind, name or issuer is not well formed
// (identity.ValidName: no colon, no "system" prefix, printable, bounded;
// identity.ValidIssuer: a DNS label that is not "bot") is refused, so that
// the mapping stays one to one and never reaches a reserved name: a local
// name has no colon, a bot's starts "bot:", a provider's user's starts
// with its issuer and a colon, and the local bob is never the provider's.
func (c Config) User(p identity.Principal) (string, error) {
	if err := p.Validate(); err != nil {
		return "", fmt.Errorf("impersonate: %w", err)
	}
	switch p.Kind {
	case identity.KindUser:
		return c.UserPrefix + p.QualifiedName(), nil
	case identity.KindBot:
		return c.UserPrefix + BotPrefix + p.Name, nil
	}
	return "", fmt.Errorf("impersonate: principal kind %q is neither %q nor %q", p.Kind, identity.KindUser, identity.KindBot)
}
