package ca

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"strings"
)

// FingerprintPrefix starts every fingerprint Limen prints.
const FingerprintPrefix = "sha256:"

// Fingerprint is "sha256:" and the lower-case hex SHA-256 of c's DER bytes.
func Fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return FingerprintPrefix + hex.EncodeToString(sum[:])
}

// ParseFingerprint normalizes a fingerprint as a user may paste it: with or
// without the "sha256:" prefix, upper or lower case, with or without colons
// between bytes. It returns the canonical form.
func ParseFingerprint(s string) (string, error) {
	t := strings.TrimSpace(s)
	if len(t) >= len(FingerprintPrefix) && strings.EqualFold(t[:len(FingerprintPrefix)], FingerprintPrefix) {
		t = t[len(FingerprintPrefix):]
	}
	if strings.Contains(t, ":") {
		parts := strings.Split(t, ":")
		for _, p := range parts {
			if len(p) != 2 {
				return "", fmt.Errorf("CA fingerprint %q: colon-separated form must have two hex digits per byte", s)
			}
		}
		t = strings.Join(parts, "")
	}
	b, err := hex.DecodeString(t)
	if err != nil || len(b) != sha256.Size {
		return "", fmt.Errorf("CA fingerprint %q: want sha256: and 64 hex digits, as `limen proxy` prints it", s)
	}
	return FingerprintPrefix + hex.EncodeToString(b), nil
}

// FindPinned returns the CA certificate in certs whose fingerprint is fp
// (canonical form), or nil.
func FindPinned(certs []*x509.Certificate, fp string) *x509.Certificate {
	for _, c := range certs {
		if c.IsCA && Fingerprint(c) == fp {
			return c
		}
	}
	return nil
}

// PinnedTLSConfig is a TLS 1.3 client configuration that trusts exactly the
// CA with fingerprint fp (canonical form): the server must send that CA in
// its chain and the leaf must verify against it for serverName. It is how
// `limen login --ca-fingerprint` and worker enrollment reach a proxy before
// they hold its CA certificate.
func PinnedTLSConfig(serverName, fp string) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		ServerName:         serverName,
		InsecureSkipVerify: true, // replaced by VerifyConnection below
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyPinned(cs, serverName, fp)
		},
	}
}

func verifyPinned(cs tls.ConnectionState, serverName, fp string) error {
	if len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("proxy sent no certificate")
	}
	ca := FindPinned(cs.PeerCertificates, fp)
	if ca == nil {
		return fmt.Errorf("proxy CA does not match the pinned fingerprint %s: check the fingerprint `limen proxy` printed, or that you reach the right proxy", fp)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{DNSName: serverName, Roots: roots, Intermediates: inter})
	if err != nil {
		return fmt.Errorf("proxy certificate does not verify against the pinned CA: %w", err)
	}
	return nil
}
