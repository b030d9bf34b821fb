package profile

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/limenhq/limen/gateway/authapi"
	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/internal/apihttp"
)

// Trust says how to trust a proxy at login. With neither field set, the CA
// stored by an earlier login is used, else the system roots.
type Trust struct {
	// CAFile is a PEM file with the proxy's CA.
	CAFile string
	// Fingerprint pins the proxy's CA by its SHA-256, as `limen proxy`
	// prints it.
	Fingerprint string
}

// trustConfig returns the TLS config for t and the CA to store after a
// successful login (nil: keep what is stored / use system roots).
func (p *Profile) trustConfig(t Trust) (*tls.Config, func(caPEM []byte) ([]byte, error), error) {
	host, _, _ := net.SplitHostPort(p.Proxy)
	switch {
	case t.CAFile != "" && t.Fingerprint != "":
		return nil, nil, errors.New("give --ca-file or --ca-fingerprint, not both")
	case t.Fingerprint != "":
		fp, err := ca.ParseFingerprint(t.Fingerprint)
		if err != nil {
			return nil, nil, err
		}
		return ca.PinnedTLSConfig(host, fp), func(caPEM []byte) ([]byte, error) {
			certs, err := ca.ParseCertsPEM(caPEM)
			if err != nil || ca.FindPinned(certs, fp) == nil {
				return nil, fmt.Errorf("the proxy returned a CA that does not match the pinned fingerprint %s", fp)
			}
			return ca.CertPEM(ca.FindPinned(certs, fp).Raw), nil
		}, nil
	case t.CAFile != "":
		data, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("ca-file: %w", err)
		}
		if _, err := ca.ParseCertsPEM(data); err != nil {
			return nil, nil, fmt.Errorf("ca-file %s: %w", t.CAFile, err)
		}
		cfg, err := tlsWithRoots(host, data)
		return cfg, func([]byte) ([]byte, error) { return data, nil }, err
	}
	stored, err := p.CAPEM()
	if err != nil {
		return nil, nil, err
	}
	cfg, err := tlsWithRoots(host, stored)
	return cfg, func([]byte) ([]byte, error) { return stored, nil }, err
}

// tlsWithRoots trusts caPEM, or the system roots when it is nil.
func tlsWithRoots(host string, caPEM []byte) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, ServerName: host}
	if caPEM != nil {
		certs, err := ca.ParseCertsPEM(caPEM)
		if err != nil {
			return nil, fmt.Errorf("stored proxy CA: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		for _, c := range certs {
			cfg.RootCAs.AddCert(c)
		}
	}
	return cfg, nil
}

// Client returns an API client for the proxy that trusts the stored CA (or
// the system roots) and presents creds when it is not nil.
func (p *Profile) Client(creds *Credentials) (*authapi.Client, error) {
	stored, err := p.CAPEM()
	if err != nil {
		return nil, err
	}
	host, _, _ := net.SplitHostPort(p.Proxy)
	cfg, err := tlsWithRoots(host, stored)
	if err != nil {
		return nil, err
	}
	if creds != nil {
		cfg.Certificates = []tls.Certificate{creds.TLS}
	}
	c := &authapi.Client{Client: apihttp.Client{Proxy: p.Proxy, HTTP: httpClient(cfg)}}
	if creds != nil {
		c.Hint = "if the proxy refused your certificate, run limen login --proxy " + p.Proxy
	}
	return c, nil
}

func httpClient(cfg *tls.Config) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}}
}

// LoginRequest is what Login needs besides the profile.
type LoginRequest struct {
	User, Password string
	Trust          Trust
	// TTL optionally asks for a shorter certificate.
	TTL time.Duration
}

// Login makes a key pair locally, sends only a certificate request with the
// password, checks the answer and stores key, certificate and CA.
func (p *Profile) Login(ctx context.Context, req LoginRequest) (*authapi.LoginResponse, error) {
	return p.loginAs(ctx, req.Trust, req.TTL, req.User,
		func(ctx context.Context, c *authapi.Client, csr, ttl string) (authapi.LoginResponse, error) {
			return c.Login(ctx, authapi.LoginRequest{User: req.User, Password: req.Password, CSR: csr, TTL: ttl})
		})
}
