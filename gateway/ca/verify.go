package ca

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"weak"

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
			return a.principals.of(ch[0])
		}
	}
	return identity.Principal{}, fmt.Errorf("%w: %q was not issued by the user issuer", ErrWrongIssuer, chains[0][0].Subject.CommonName)
}

// principalMemo remembers the principal decoded from each verified leaf
// certificate while the certificate lives. crypto/tls verifies and parses a
// client's certificate once per connection and every request on it shares
// the same *x509.Certificate, so an HTTP/2 connection decodes its principal
// once. The memo holds the certificate only weakly: an entry goes when its
// connection's certificate is collected.
type principalMemo struct{ m sync.Map } // weak.Pointer[x509.Certificate] → identity.Principal

// of returns leaf's principal, decoding it on first use. The Principal is
// shared between the requests of a connection: callers must not change its
// Traits.
func (pm *principalMemo) of(leaf *x509.Certificate) (identity.Principal, error) {
	key := weak.Make(leaf)
	if p, ok := pm.m.Load(key); ok {
		return p.(identity.Principal), nil
	}
	p, err := principalOf(leaf)
	if err != nil {
		return identity.Principal{}, err // refusals are not remembered
	}
	if _, loaded := pm.m.LoadOrStore(key, p); !loaded {
		runtime.AddCleanup(leaf, func(k weak.Pointer[x509.Certificate]) { pm.m.Delete(k) }, key)
	}
	return p, nil
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
	if p.Requests, err = requestsOf(leaf); err != nil {
		return identity.Principal{}, err
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
