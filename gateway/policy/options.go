package policy

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/limenhq/limen/gateway/store"
)

// Defaults for Options fields left zero.
const (
	DefaultMinDelay     = 10 * time.Second
	DefaultMaxDelay     = 30 * time.Second
	DefaultKeyID        = "default" // the key id `opa build --signing-key` writes
	DefaultKeyAlgorithm = "RS256"
	DefaultCacheEntries = 100_000
	DefaultMaxBundle    = 64 << 20
)

// Options chooses where policy comes from and how it is refreshed. The zero
// value (no BundleURL, no Bundle) selects the embedded default bundle.
//
// Config keys (flags, LIMEN_* variables, YAML) are given in brackets; errors
// from Validate name them.
type Options struct {
	// BundleURL is the bundle service resource to poll, https://…/bundle.tar.gz
	// [policy-bundle-url]. Only https is accepted, also for redirects.
	// Setting it requires PublicKeyPEM.
	BundleURL string
	// BundleCAPEM, when set, holds the only CA certificates (PEM) that the
	// bundle service's certificate may chain to; unset, the system roots
	// [policy-bundle-ca, a file path].
	BundleCAPEM []byte
	// Bundle is a static signed bundle (tar.gz), for `limen policy eval|check`.
	Bundle []byte
	// PublicKeyPEM verifies bundle signatures (PEM public key, or an HMAC secret
	// with an HS* algorithm) [policy-public-key, a file path].
	PublicKeyPEM []byte
	// KeyID is the key id the signature must name [policy-key-id].
	KeyID string
	// KeyAlgorithm is the signature algorithm, for example RS256 or ES256
	// [policy-key-algorithm].
	KeyAlgorithm string
	// InsecureSkipVerify accepts Bundle without checking its signature. It is
	// refused together with BundleURL: pulled bundles are always verified.
	InsecureSkipVerify bool
	// MinDelay and MaxDelay bound the random wait between two polls
	// [policy-min-delay, policy-max-delay].
	MinDelay, MaxDelay time.Duration
	// PersistDir keeps the last good bundle and the status, so a restart
	// with the bundle service down still answers [policy-persist-dir].
	PersistDir string
	// Shared, when set, is the revision floor and refusal history the
	// proxies of one deployment share (shared.go); ProxyID names this
	// proxy in the refusals it stores there.
	Shared  store.Policy
	ProxyID string
	// CacheEntries bounds the decision cache; negative disables it.
	CacheEntries int
	// MaxBundleBytes bounds a downloaded bundle.
	MaxBundleBytes int64
	// HTTPClient fetches bundles; nil means a client with a 30 s timeout,
	// TLS 1.2 or later and BundleCAPEM's roots. Either way Validate makes it
	// refuse redirects to anything but https.
	HTTPClient *http.Client
	// Logger receives activation, refusal and fetch logs; nil means slog.Default().
	Logger *slog.Logger

	// clientReady is set once Validate has built or wrapped HTTPClient, so
	// that validating again changes nothing.
	clientReady bool
}

// Source names where an engine's policy comes from.
func (o Options) Source() string {
	switch {
	case o.BundleURL != "":
		return SourceService
	case o.Bundle != nil:
		return SourceStatic
	}
	return SourceEmbedded
}

// Sources reported in Status.
const (
	SourceEmbedded = "embedded"
	SourceService  = "bundle-service"
	SourceStatic   = "bundle-file"
)

// Validate checks o and fills in defaults. Errors name the config key and
// say how to fix it.
func (o *Options) Validate() error {
	if o.KeyID == "" {
		o.KeyID = DefaultKeyID
	}
	if o.KeyAlgorithm == "" {
		o.KeyAlgorithm = DefaultKeyAlgorithm
	}
	if o.MinDelay == 0 {
		o.MinDelay = DefaultMinDelay
	}
	if o.MaxDelay == 0 {
		o.MaxDelay = max(DefaultMaxDelay, o.MinDelay)
	}
	if o.CacheEntries == 0 {
		o.CacheEntries = DefaultCacheEntries
	}
	if o.MaxBundleBytes <= 0 {
		o.MaxBundleBytes = DefaultMaxBundle
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	var errs []error
	if err := o.httpClient(); err != nil {
		errs = append(errs, err)
	}
	if o.BundleURL != "" {
		errs = append(errs, o.validateService()...)
	}
	if o.BundleURL == "" && o.Bundle == nil && len(o.PublicKeyPEM) > 0 {
		errs = append(errs, errors.New("policy-public-key is set but policy-bundle-url is not: set the bundle URL, or drop the key to use the embedded default policy"))
	}
	if len(o.PublicKeyPEM) > 0 {
		if err := checkKey(o.PublicKeyPEM, o.KeyAlgorithm); err != nil {
			errs = append(errs, fmt.Errorf("policy-public-key: %w", err))
		}
	}
	if o.Bundle != nil && len(o.PublicKeyPEM) == 0 && !o.InsecureSkipVerify {
		errs = append(errs, errors.New("a bundle file needs policy-public-key to verify its signature (or skip verification explicitly for offline debugging)"))
	}
	return errors.Join(errs...)
}

func (o *Options) validateService() []error {
	var errs []error
	u, err := url.Parse(o.BundleURL)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("policy-bundle-url %q: %w", o.BundleURL, err))
	case u.Scheme == "http":
		errs = append(errs, fmt.Errorf("policy-bundle-url %q: http:// is refused, bundles come over https only: serve the bundle over TLS and give its CA with policy-bundle-ca if it is private", u.Redacted()))
	case u.Scheme != "https", u.Host == "":
		errs = append(errs, fmt.Errorf("policy-bundle-url %q: want https://host/path/bundle.tar.gz", u.Redacted()))
	}
	if o.Bundle != nil {
		errs = append(errs, errors.New("policy-bundle-url and a bundle file are exclusive: choose one"))
	}
	if len(o.PublicKeyPEM) == 0 {
		errs = append(errs, errors.New("policy-public-key: required with policy-bundle-url; pulled bundles must be signed (`make bundle`, `opa build --signing-key`)"))
	}
	if o.InsecureSkipVerify {
		errs = append(errs, errors.New("pulled bundles are always verified: drop the skip-verify setting"))
	}
	if o.MinDelay < time.Second || o.MaxDelay < o.MinDelay {
		errs = append(errs, fmt.Errorf("policy-min-delay %s / policy-max-delay %s: want 1s <= min <= max", o.MinDelay, o.MaxDelay))
	}
	return errs
}

// httpClient builds the default client, or wraps the given one, so that
// a redirect can never leave https.
func (o *Options) httpClient() error {
	if len(o.BundleCAPEM) > 0 && o.BundleURL == "" {
		return errors.New("policy-bundle-ca is set but policy-bundle-url is not: set the bundle URL, or drop the CA")
	}
	if o.clientReady {
		return nil
	}
	if o.HTTPClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		if len(o.BundleCAPEM) > 0 {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(o.BundleCAPEM) {
				return errors.New("policy-bundle-ca: no PEM certificate found: give the CA certificate file that signed the bundle server's certificate")
			}
			tr.TLSClientConfig.RootCAs = pool
		}
		o.HTTPClient = &http.Client{Timeout: 30 * time.Second, Transport: tr}
	} else if len(o.BundleCAPEM) > 0 {
		return errors.New("policy-bundle-ca is set together with a custom HTTP client: configure the CA in that client instead")
	}
	c := *o.HTTPClient
	next := c.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if req.URL.Scheme != "https" {
			return &refusal{reason: ReasonNotHTTPS, err: fmt.Errorf("%w: redirected to %s: bundles come over https only; point policy-bundle-url at the final https URL", ErrBundleRefused, req.URL.Redacted())}
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	o.HTTPClient, o.clientReady = &c, true
	return nil
}

// checkKey fails early on a key OPA could not use, instead of refusing every
// bundle later.
func checkKey(key []byte, alg string) error {
	switch alg {
	case "HS256", "HS384", "HS512":
		if len(key) < 32 {
			return fmt.Errorf("%s secret is %d bytes: use at least 32", alg, len(key))
		}
		return nil
	case "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512":
	default:
		return fmt.Errorf("policy-key-algorithm %q: want RS256/384/512, PS256/384/512, ES256/384/512 or HS256/384/512", alg)
	}
	block, _ := pem.Decode(key)
	if block == nil {
		return errors.New("not a PEM block: give the public key file written by `openssl rsa -pubout` (or the certificate)")
	}
	switch block.Type {
	case "PUBLIC KEY":
		_, err := x509.ParsePKIXPublicKey(block.Bytes)
		return err
	case "CERTIFICATE":
		_, err := x509.ParseCertificate(block.Bytes)
		return err
	case "RSA PUBLIC KEY":
		_, err := x509.ParsePKCS1PublicKey(block.Bytes)
		return err
	}
	return fmt.Errorf("PEM block %q: want PUBLIC KEY or CERTIFICATE (never the private key)", block.Type)
}
