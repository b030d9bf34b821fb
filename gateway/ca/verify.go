package ca

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"

	"github.com/limenhq/limen/gateway/identity"
)

// Refusals of a client certificate.
var (
	// ErrNoClientCert means the TLS client presented no verified certificate.
	ErrNoClientCert = errors.New("no client certificate: run limen login")
	// ErrWrongIssuer means the certificate is valid but of the other kind
	// (a worker certificate where a user one is needed, or the reverse).
	ErrWrongIssuer = errors.New("client certificate is not of the expected kind")
)

// PrincipalFromChains returns the principal of a user or bot certificate
// from the chains crypto/tls verified (tls.ConnectionState.VerifiedChains).
// The proxy's TLS config makes the stack verify signatures and expiry; this
// checks the chain ends at the user issuer and decodes the extension.
func (a *Authority) PrincipalFromChains(chains [][]*x509.Certificate) (identity.Principal, error) {
	if len(chains) == 0 || len(chains[0]) == 0 {
		return identity.Principal{}, ErrNoClientCert
	}
	for _, ch := range chains {
		if isIssuedBy(ch, a.user) {
			return principalOf(ch[0])
		}
	}
	return identity.Principal{}, fmt.Errorf("%w: %q was not issued by the user issuer", ErrWrongIssuer, chains[0][0].Subject.CommonName)
}

// PrincipalFromRequest is PrincipalFromChains for an HTTP request served
// with ServerTLSConfig.
func (a *Authority) PrincipalFromRequest(r *http.Request) (identity.Principal, error) {
	if r.TLS == nil {
		return identity.Principal{}, ErrNoClientCert
	}
	return a.PrincipalFromChains(r.TLS.VerifiedChains)
}

// ClusterFromChains returns the cluster a worker certificate is bound to,
// from the chains crypto/tls verified.
func (a *Authority) ClusterFromChains(chains [][]*x509.Certificate) (string, error) {
	if len(chains) == 0 || len(chains[0]) == 0 {
		return "", ErrNoClientCert
	}
	for _, ch := range chains {
		if isIssuedBy(ch, a.worker) {
			der, err := extension(ch[0], OIDWorkerCluster.String())
			if err != nil {
				return "", err
			}
			return DecodeWorkerCluster(der)
		}
	}
	return "", fmt.Errorf("%w: %q was not issued by the worker issuer", ErrWrongIssuer, chains[0][0].Subject.CommonName)
}

// VerifyUserCert verifies leaf against the user issuer at the CA's current
// time (for callers that do not go through crypto/tls) and returns its
// principal.
func (a *Authority) VerifyUserCert(leaf *x509.Certificate) (identity.Principal, error) {
	pool := x509.NewCertPool()
	pool.AddCert(a.user.cert)
	chains, err := leaf.Verify(x509.VerifyOptions{
		Roots: pool, CurrentTime: a.now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return identity.Principal{}, fmt.Errorf("verify client certificate: %w", err)
	}
	return a.PrincipalFromChains(chains)
}

func principalOf(leaf *x509.Certificate) (identity.Principal, error) {
	der, err := extension(leaf, OIDPrincipal.String())
	if err != nil {
		return identity.Principal{}, err
	}
	p, err := DecodePrincipal(der)
	if err != nil {
		return identity.Principal{}, err
	}
	if p.Name != leaf.Subject.CommonName {
		return identity.Principal{}, fmt.Errorf("%w: principal %q does not match subject %q", ErrBadExtension, p.Name, leaf.Subject.CommonName)
	}
	return p, nil
}

// PrincipalOfCert decodes the principal extension of a certificate without
// verifying it; clients use it to show who they are logged in as.
func PrincipalOfCert(c *x509.Certificate) (identity.Principal, error) { return principalOf(c) }

func extension(c *x509.Certificate, oid string) ([]byte, error) {
	var found []byte
	for _, e := range c.Extensions {
		if e.Id.String() != oid {
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("%w: %s appears twice", ErrBadExtension, oid)
		}
		found = e.Value
	}
	if found == nil {
		return nil, fmt.Errorf("%w: %s is missing", ErrBadExtension, oid)
	}
	return found, nil
}
