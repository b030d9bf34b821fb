// Package grant is the signed statement the proxy hands the worker at the
// start of every tunnel stream: who the caller is, which Kubernetes groups the
// proxy's policy let them assume on which cluster, and until when. Beside it
// each stream carries its own Request (request.go): the session id and the
// client's address, which are the stream's, not the decision's.
//
// A grant is a decision, not a request, so the proxy signs one per
// principal, cluster, groups and policy revision and reuses it for a short
// while (Signer), and the worker verifies each distinct token once
// (Verifier): no request pays for asymmetric crypto on the hot path. What a
// reused or replayed grant can and cannot do is in Signer's comment.
//
// A token is
//
//	version (1 byte) || payload (JSON) || Ed25519 signature (64 bytes)
//
// and the signature covers a domain-separation prefix, the version byte and
// the payload, so a signature made for any other Limen purpose never verifies
// as a grant. Decoding is strict: an unknown version, an unknown JSON field,
// trailing bytes, unsorted or duplicate groups and "system:" groups are all
// refused, because the worker acts on the grant with cluster-wide
// impersonation rights.
package grant

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/internal/strictjson"
	"github.com/limenhq/limen/gateway/kpath"
)

// Version is the only grant format this package signs and accepts.
const Version = 1

// MaxTokenSize bounds a signed token; it is also the preamble's hard cap.
const MaxTokenSize = 16 << 10

// MaxGroups bounds the number of groups in one grant.
const MaxGroups = 256

// MaxClockSkew is how far in the future a grant's issue time may lie, to
// tolerate clocks that disagree between proxy and worker.
const MaxClockSkew = 30 * time.Second

// signingContext separates grant signatures from anything else the same key
// might ever sign.
const signingContext = "limen-grant\x00"

// Sentinel errors returned (wrapped) by Verify, so the worker can audit why a
// grant was refused. Every Verify error wraps exactly one of them.
var (
	// ErrMalformed: the token cannot be decoded or a field is invalid.
	ErrMalformed = errors.New("grant malformed")
	// ErrForged: the signature does not verify with the pinned key.
	ErrForged = errors.New("grant signature invalid")
	// ErrExpired: the grant's expiry has passed.
	ErrExpired = errors.New("grant expired")
	// ErrNotYetValid: the grant was issued further in the future than MaxClockSkew.
	ErrNotYetValid = errors.New("grant not yet valid")
	// ErrWrongCluster: the grant names a cluster this worker does not serve.
	ErrWrongCluster = errors.New("grant is for another cluster")
	// ErrSystemGroup: the grant lists a "system:" group, which Limen never grants.
	ErrSystemGroup = errors.New("grant lists a system: group")
)

// Grant is what the proxy decided for a principal on a cluster.
type Grant struct {
	// Version is the format version; Sign sets it, Verify checks it.
	Version   int                `json:"v"`
	Principal identity.Principal `json:"principal"`
	// Groups are every group the caller may assume on Cluster, sorted and
	// without duplicates.
	Groups    []string  `json:"groups"`
	Cluster   string    `json:"cluster"`
	IssuedAt  time.Time `json:"iat"`
	ExpiresAt time.Time `json:"exp"`
	// Purpose, when set, restricts the grant to one kind of request the
	// proxy makes itself: PurposeAccessReview carries only a
	// SelfSubjectRulesReview, which the client's scope does not govern
	// (it asks Kubernetes what the client's identity may do, and does
	// nothing). Empty is an ordinary grant.
	Purpose string `json:"purpose,omitempty"`
}

// PurposeAccessReview is the purpose of the grant under which the proxy
// asks "what may I do" (gateway/access) as the client's identity.
const PurposeAccessReview = "access-review"

// NewSessionID returns 128 random bits as 32 lowercase hex characters.
func NewSessionID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("session id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Sign validates g and returns the signed token. Groups are sorted and
// de-duplicated on a copy; Version is set. The caller makes sure ExpiresAt is
// no later than the client certificate's expiry.
func Sign(key ed25519.PrivateKey, g Grant) ([]byte, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("sign grant: private key is %d bytes, want %d", len(key), ed25519.PrivateKeySize)
	}
	if g.Version != 0 && g.Version != Version {
		return nil, fmt.Errorf("sign grant: version %d, only %d is supported", g.Version, Version)
	}
	g.Version = Version
	g.Groups = slices.Compact(slices.Sorted(slices.Values(g.Groups)))
	g.IssuedAt = g.IssuedAt.UTC().Round(0)
	g.ExpiresAt = g.ExpiresAt.UTC().Round(0)
	if err := g.validate(); err != nil {
		return nil, fmt.Errorf("sign grant: %w", err)
	}
	payload, err := json.Marshal(g)
	if err != nil {
		return nil, fmt.Errorf("sign grant: encode: %w", err)
	}
	token := make([]byte, 0, 1+len(payload)+ed25519.SignatureSize)
	token = append(token, Version)
	token = append(token, payload...)
	token = append(token, ed25519.Sign(key, signedMessage(token))...)
	if len(token) > MaxTokenSize {
		return nil, fmt.Errorf("sign grant: token is %d bytes, over the %d-byte limit", len(token), MaxTokenSize)
	}
	return token, nil
}

// Verify checks token's signature with pub, decodes it strictly and checks
// that it is for cluster and valid at now. The returned error wraps one of
// the package's sentinel errors.
func Verify(pub ed25519.PublicKey, token []byte, cluster string, now time.Time) (Grant, error) {
	if len(pub) != ed25519.PublicKeySize {
		// A misconfigured key is an operator problem, but refusing is the only safe answer.
		return Grant{}, fmt.Errorf("verify grant: public key is %d bytes, want %d: %w", len(pub), ed25519.PublicKeySize, ErrForged)
	}
	if len(token) > MaxTokenSize {
		return Grant{}, fmt.Errorf("verify grant: %d bytes, over the %d-byte limit: %w", len(token), MaxTokenSize, ErrMalformed)
	}
	if len(token) < 1+2+ed25519.SignatureSize {
		return Grant{}, fmt.Errorf("verify grant: %d bytes is too short: %w", len(token), ErrMalformed)
	}
	if token[0] != Version {
		return Grant{}, fmt.Errorf("verify grant: unsupported version %d: %w", token[0], ErrMalformed)
	}
	body, sig := token[:len(token)-ed25519.SignatureSize], token[len(token)-ed25519.SignatureSize:]
	if !ed25519.Verify(pub, signedMessage(body), sig) {
		return Grant{}, fmt.Errorf("verify grant: %w", ErrForged)
	}
	g, err := decode(body[1:])
	if err != nil {
		return Grant{}, fmt.Errorf("verify grant: %w", err)
	}
	if err := g.check(cluster, now); err != nil {
		return Grant{}, fmt.Errorf("verify grant of %s: %w", g.Principal, err)
	}
	return g, nil
}

// check applies the time and cluster rules after a successful decode.
func (g Grant) check(cluster string, now time.Time) error {
	if g.Cluster != cluster {
		return fmt.Errorf("cluster %q, this worker serves %q: %w", g.Cluster, cluster, ErrWrongCluster)
	}
	if !now.Before(g.ExpiresAt) {
		return fmt.Errorf("expired at %s, now %s: %w", g.ExpiresAt.Format(time.RFC3339), now.UTC().Format(time.RFC3339), ErrExpired)
	}
	if g.IssuedAt.After(now.Add(MaxClockSkew)) {
		return fmt.Errorf("issued at %s, now %s: %w", g.IssuedAt.Format(time.RFC3339), now.UTC().Format(time.RFC3339), ErrNotYetValid)
	}
	return nil
}

func signedMessage(body []byte) []byte {
	m := make([]byte, 0, len(signingContext)+len(body))
	return append(append(m, signingContext...), body...)
}

// decode parses a signed payload strictly. Its errors wrap ErrMalformed or
// ErrSystemGroup.
func decode(payload []byte) (Grant, error) {
	var g Grant
	if err := strictjson.Unmarshal(payload, &g); err != nil {
		return Grant{}, fmt.Errorf("decode: %v: %w", err, ErrMalformed)
	}
	if g.Version != Version {
		return Grant{}, fmt.Errorf("payload version %d, want %d: %w", g.Version, Version, ErrMalformed)
	}
	if err := g.validate(); err != nil {
		if errors.Is(err, ErrSystemGroup) {
			return Grant{}, err
		}
		return Grant{}, fmt.Errorf("%v: %w", err, ErrMalformed)
	}
	return g, nil
}

// validate checks every field's shape. Errors about system groups wrap
// ErrSystemGroup; the others are plain.
func (g Grant) validate() error {
	if err := g.Principal.Validate(); err != nil {
		return fmt.Errorf("principal: %w", err)
	}
	if err := kpath.ValidCluster(g.Cluster); err != nil {
		return err
	}
	if err := validGroups(g.Groups); err != nil {
		return err
	}
	if g.Purpose != "" && g.Purpose != PurposeAccessReview {
		return fmt.Errorf("unknown purpose %q", clip(g.Purpose))
	}
	switch {
	case g.IssuedAt.IsZero() || g.ExpiresAt.IsZero():
		return errors.New("issue and expiry times are required")
	case !g.ExpiresAt.After(g.IssuedAt):
		return fmt.Errorf("expiry %s is not after issue time %s", g.ExpiresAt.Format(time.RFC3339), g.IssuedAt.Format(time.RFC3339))
	}
	return nil
}

func validGroups(groups []string) error {
	if len(groups) == 0 {
		return errors.New("no groups: a grant must allow at least one")
	}
	if len(groups) > MaxGroups {
		return fmt.Errorf("%d groups, over the limit of %d", len(groups), MaxGroups)
	}
	for i, grp := range groups {
		if strings.HasPrefix(grp, "system:") {
			return fmt.Errorf("group %q: %w", clip(grp), ErrSystemGroup)
		}
		if grp == "" || len(grp) > identity.MaxNameLen || !printableASCII(grp) || strings.ContainsAny(grp, " ,") {
			return fmt.Errorf("group %q is empty, too long, or contains a space, comma or non-printable byte", clip(grp))
		}
		if i > 0 && groups[i-1] >= grp {
			return fmt.Errorf("groups are not sorted and unique at %q", clip(grp))
		}
	}
	return nil
}

// ValidTraceParent reports whether s is a W3C trace-context version-00
// traceparent: 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>, lowercase,
// with non-zero ids.
func ValidTraceParent(s string) bool {
	if len(s) != 55 || s[:3] != "00-" || s[35] != '-' || s[52] != '-' {
		return false
	}
	trace, span, flags := s[3:35], s[36:52], s[53:]
	return lowerHex(trace) && lowerHex(span) && lowerHex(flags) &&
		strings.Trim(trace, "0") != "" && strings.Trim(span, "0") != ""
}

func validSessionID(s string) bool { return len(s) == 32 && lowerHex(s) }

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// clip shortens attacker-controlled strings before they reach error messages.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
