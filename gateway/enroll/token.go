// Package enroll joins workers to the proxy. On the proxy it keeps one-time
// join tokens (single use, expiring, bound to a cluster); on the worker it
// exchanges a token for a worker certificate and stores that identity.
//
// A join token reads "lj1.<secret>.<fingerprint>": the version, 32 random
// bytes in unpadded base64url, and the hex SHA-256 of the proxy's root CA, so
// the worker can pin the proxy before it trusts anything. The proxy stores
// only the SHA-256 of the secret.
package enroll

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/limenhq/limen/gateway/ca"
)

const tokenPrefix = "lj1"

// maxTokenLen bounds what ParseToken reads.
const maxTokenLen = 256

// ErrMalformedToken means a string is not a join token at all.
var ErrMalformedToken = errors.New("malformed join token: copy the whole line `limen tokens create` printed")

// Token is a decoded join token.
type Token struct {
	Secret        [32]byte
	CAFingerprint string // canonical "sha256:…"
}

// NewToken makes a token for the CA with fingerprint fp.
func NewToken(fp string) (Token, error) {
	canon, err := ca.ParseFingerprint(fp)
	if err != nil {
		return Token{}, err
	}
	t := Token{CAFingerprint: canon}
	if _, err := rand.Read(t.Secret[:]); err != nil {
		return Token{}, fmt.Errorf("join token: %w", err)
	}
	return t, nil
}

// String is the token as printed and pasted.
func (t Token) String() string {
	return tokenPrefix + "." + base64.RawURLEncoding.EncodeToString(t.Secret[:]) + "." +
		strings.TrimPrefix(t.CAFingerprint, ca.FingerprintPrefix)
}

// ID is a short public name for the token (audit, listings); it reveals
// nothing about the secret.
func (t Token) ID() string {
	h := t.hash()
	return hex.EncodeToString(h[:6])
}

func (t Token) hash() [32]byte { return sha256.Sum256(t.Secret[:]) }

// ParseToken decodes a join token.
func ParseToken(s string) (Token, error) {
	s = strings.TrimSpace(s)
	if len(s) > maxTokenLen {
		return Token{}, ErrMalformedToken
	}
	parts := strings.Split(s, ".")
	if len(parts) != 3 || parts[0] != tokenPrefix {
		return Token{}, ErrMalformedToken
	}
	// The base64 decoder skips CR and LF; a token must not contain them.
	if strings.ContainsAny(parts[1], "\r\n") {
		return Token{}, ErrMalformedToken
	}
	secret, err := base64.RawURLEncoding.Strict().DecodeString(parts[1])
	if err != nil || len(secret) != 32 {
		return Token{}, ErrMalformedToken
	}
	if len(parts[2]) != 64 || strings.ToLower(parts[2]) != parts[2] {
		return Token{}, ErrMalformedToken
	}
	fp, err := ca.ParseFingerprint(parts[2])
	if err != nil {
		return Token{}, ErrMalformedToken
	}
	t := Token{CAFingerprint: fp}
	copy(t.Secret[:], secret)
	return t, nil
}
