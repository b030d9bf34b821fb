package policy

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"
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
	// BundleURL is the bundle service resource to poll, http(s)://…/bundle.tar.gz
	// [policy-bundle-url]. Setting it requires PublicKeyPEM.
	BundleURL string
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
	// CacheEntries bounds the decision cache; negative disables it.
	CacheEntries int
	// MaxBundleBytes bounds a downloaded bundle.
	MaxBundleBytes int64
	// HTTPClient fetches bundles; nil means a client with a 30 s timeout.
	HTTPClient *http.Client
	// Logger receives activation, refusal and fetch logs; nil means slog.Default().
	Logger *slog.Logger
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
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	var errs []error
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
	case u.Scheme != "https" && u.Scheme != "http", u.Host == "":
		errs = append(errs, fmt.Errorf("policy-bundle-url %q: want http(s)://host/path/bundle.tar.gz", o.BundleURL))
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
