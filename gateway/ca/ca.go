// Package ca is the proxy's certificate authority. It issues the
// short-lived client certificates that carry a user's or bot's principal,
// the worker certificates bound to one cluster, and the proxy's own TLS
// serving certificate, and it holds the Ed25519 key that signs grants.
//
// Key hierarchy (all ECDSA P-256 except the grant key):
//
//	root CA  ──signs──▶ user issuer   ──signs──▶ user and bot certificates
//	         ──signs──▶ worker issuer ──signs──▶ worker certificates
//	         ──signs──▶ proxy TLS serving certificate
//	grant key (Ed25519, separate): signs grants; workers pin its public key
//
// Clients trust the root (its SHA-256 fingerprint is what `limen proxy`
// prints); the proxy accepts client certificates only from the two issuers,
// and tells them apart by issuer, so a worker certificate is never a user's.
package ca

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/limenhq/limen/gateway/kpath"
)

// Certificate lifetimes.
const (
	DefaultUserCertTTL   = 8 * time.Hour
	MaxUserCertTTL       = 24 * time.Hour
	DefaultWorkerCertTTL = 90 * 24 * time.Hour
	rootTTL              = 10 * 365 * 24 * time.Hour
	issuerTTL            = 5 * 365 * 24 * time.Hour
	servingTTL           = 365 * 24 * time.Hour
	servingRenewBefore   = 30 * 24 * time.Hour
	clockSkew            = time.Minute
)

// Options configures Open. Only DataDir is required.
type Options struct {
	// DataDir holds the generated keys and certificates under DataDir/ca.
	DataDir string
	// KeysDir, when set, holds the key material every proxy of one
	// deployment must share (root, user and worker issuers, grant key),
	// made beforehand by InitKeys (limen proxy keys init) and mounted
	// read-only (a Kubernetes Secret). Open then generates none of it: a
	// proxy that made its own would split the deployment in two. The
	// serving certificate stays per proxy in DataDir/ca.
	KeysDir string
	// CACertFile and CAKeyFile name an operator-provided root CA (both or
	// neither). Without them a root is generated on first start.
	CACertFile, CAKeyFile string
	// TLSCertFile and TLSKeyFile name an operator-provided serving
	// certificate chain and key (both or neither).
	TLSCertFile, TLSKeyFile string
	// ServerNames are DNS names or IP addresses added to the generated
	// serving certificate, besides localhost and 127.0.0.1.
	ServerNames []string
	// UserCertTTL is the lifetime of user certificates: 0 means
	// DefaultUserCertTTL; more than MaxUserCertTTL is an error.
	UserCertTTL time.Duration
	// WorkerCertTTL is the lifetime of worker certificates (0: default).
	WorkerCertTTL time.Duration
	// Now is the clock; nil means time.Now. Tests set it to issue expired
	// certificates.
	Now func() time.Time
	// Logger receives one line per generated file; nil means slog.Default().
	Logger *slog.Logger
}

type issuer struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// Authority is the proxy's CA. It is safe for concurrent use.
type Authority struct {
	// shared: the key material is KeysDir's, never generated here.
	shared    bool
	root      issuer
	user      issuer
	worker    issuer
	serving   tls.Certificate
	grantKey  ed25519.PrivateKey
	userTTL   time.Duration
	workerTTL time.Duration
	now       func() time.Time
	// principals decodes each connection's principal once (verify.go).
	principals principalMemo
}

// Open loads the CA from opts.DataDir (and operator files), generating what
// is missing.
func Open(opts Options) (*Authority, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	a := &Authority{userTTL: opts.UserCertTTL, workerTTL: opts.WorkerCertTTL, now: opts.Now, shared: opts.KeysDir != ""}
	if a.userTTL == 0 {
		a.userTTL = DefaultUserCertTTL
	}
	if a.workerTTL == 0 {
		a.workerTTL = DefaultWorkerCertTTL
	}
	if a.now == nil {
		a.now = time.Now
	}
	dir := filepath.Join(opts.DataDir, "ca")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create CA directory: %w", err)
	}
	keys := dir
	if a.shared {
		keys = opts.KeysDir
	}
	if err := a.loadKeys(keys, opts, log); err != nil {
		return nil, err
	}
	var err error
	if a.serving, err = a.loadServing(dir, opts, log); err != nil {
		return nil, err
	}
	return a, nil
}

// loadKeys loads (or, unless shared, makes) the root, the two issuers and
// the grant key in dir.
func (a *Authority) loadKeys(dir string, opts Options, log *slog.Logger) error {
	var err error
	if a.root, err = a.loadRoot(dir, opts, log); err != nil {
		return err
	}
	if a.user, err = a.loadIssuer(dir, "user", log); err != nil {
		return err
	}
	if a.worker, err = a.loadIssuer(dir, "worker", log); err != nil {
		return err
	}
	gk, created, err := a.key(filepath.Join(dir, "grant.key"), genEd25519)
	if err != nil {
		return fmt.Errorf("grant signing key: %w", err)
	}
	var ok bool
	if a.grantKey, ok = gk.(ed25519.PrivateKey); !ok {
		return fmt.Errorf("%s holds a %T key; the grant key must be Ed25519", filepath.Join(dir, "grant.key"), gk)
	}
	if created {
		log.Info("generated grant signing key", "path", filepath.Join(dir, "grant.key"))
	}
	return nil
}

// errSharedMissing is the refusal to generate shared key material.
func errSharedMissing(path string) error {
	return fmt.Errorf("%s: missing or unusable in the shared ca-dir; this proxy does not make its own CA or grant key "+
		"(proxies would no longer trust each other's certificates): run limen proxy keys init --ca-dir DIR and mount DIR on every proxy", path)
}

// key loads the key at path, generating it when missing unless the key
// material is shared.
func (a *Authority) key(path string, gen func() (crypto.Signer, error)) (crypto.Signer, bool, error) {
	if a.shared {
		data, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			return nil, false, errSharedMissing(path)
		}
		if err != nil {
			return nil, false, fmt.Errorf("read %s: %w", path, err)
		}
		k, err := ParseKeyPEM(data)
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", path, err)
		}
		return k, false, nil
	}
	return loadOrCreateKey(path, gen)
}

// InitKeys makes (or completes, or renews when near their end) the key
// material proxies share in dir: what `limen proxy keys init` writes
// before the first proxy starts. opts.CACertFile and CAKeyFile name an
// operator's root, as for Open. It returns the root's fingerprint.
func InitKeys(dir string, opts Options) (string, error) {
	if (opts.CACertFile == "") != (opts.CAKeyFile == "") {
		return "", errors.New("ca-cert and ca-key must be given together")
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	a := &Authority{now: opts.Now}
	if a.now == nil {
		a.now = time.Now
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	if err := a.loadKeys(dir, opts, log); err != nil {
		return "", err
	}
	return a.Fingerprint(), nil
}

func (o Options) validate() error {
	switch {
	case o.DataDir == "":
		return errors.New("data-dir is empty: set --data-dir or LIMEN_DATA_DIR")
	case (o.CACertFile == "") != (o.CAKeyFile == ""):
		return errors.New("ca-cert and ca-key must be given together")
	case (o.TLSCertFile == "") != (o.TLSKeyFile == ""):
		return errors.New("tls-cert and tls-key must be given together")
	case o.UserCertTTL < 0 || o.UserCertTTL > MaxUserCertTTL:
		return fmt.Errorf("user-cert-ttl %s: must be between 1m and %s", o.UserCertTTL, MaxUserCertTTL)
	case o.UserCertTTL != 0 && o.UserCertTTL < time.Minute:
		return fmt.Errorf("user-cert-ttl %s: must be at least 1m", o.UserCertTTL)
	case o.WorkerCertTTL < 0:
		return fmt.Errorf("worker-cert-ttl %s must not be negative", o.WorkerCertTTL)
	}
	return nil
}

func (a *Authority) loadRoot(dir string, opts Options, log *slog.Logger) (issuer, error) {
	if opts.CACertFile != "" {
		cert, err := readCert(opts.CACertFile)
		if err != nil {
			return issuer{}, fmt.Errorf("ca-cert: %w", err)
		}
		data, err := os.ReadFile(opts.CAKeyFile)
		if err != nil {
			return issuer{}, fmt.Errorf("ca-key: %w", err)
		}
		key, err := ParseKeyPEM(data)
		if err != nil {
			return issuer{}, fmt.Errorf("ca-key %s: %w", opts.CAKeyFile, err)
		}
		if !cert.IsCA {
			return issuer{}, fmt.Errorf("ca-cert %s is not a CA certificate (basicConstraints CA:FALSE)", opts.CACertFile)
		}
		if !samePublicKey(cert.PublicKey, key.Public()) {
			return issuer{}, fmt.Errorf("ca-key %s does not match ca-cert %s", opts.CAKeyFile, opts.CACertFile)
		}
		return issuer{cert, key}, nil
	}
	key, _, err := a.key(filepath.Join(dir, "root.key"), genECDSA)
	if err != nil {
		return issuer{}, fmt.Errorf("root CA key: %w", err)
	}
	certPath := filepath.Join(dir, "root.crt")
	cert, err := readCert(certPath)
	if err == nil && samePublicKey(cert.PublicKey, key.Public()) {
		return issuer{cert, key}, nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return issuer{}, fmt.Errorf("root CA certificate: %w", err)
	}
	if a.shared {
		return issuer{}, errSharedMissing(certPath)
	}
	cert, err = a.selfSign(key)
	if err != nil {
		return issuer{}, err
	}
	if err := WriteFileAtomic(certPath, CertPEM(cert.Raw), 0o644); err != nil {
		return issuer{}, err
	}
	log.Info("generated root CA", "path", certPath, "fingerprint", Fingerprint(cert))
	return issuer{cert, key}, nil
}

// loadIssuer returns the intermediate named name, regenerating it when it is
// missing, not signed by the current root, or near its end.
func (a *Authority) loadIssuer(dir, name string, log *slog.Logger) (issuer, error) {
	key, _, err := a.key(filepath.Join(dir, name+".key"), genECDSA)
	if err != nil {
		return issuer{}, fmt.Errorf("%s issuer key: %w", name, err)
	}
	certPath := filepath.Join(dir, name+".crt")
	cert, err := readCert(certPath)
	if err == nil && samePublicKey(cert.PublicKey, key.Public()) &&
		cert.CheckSignatureFrom(a.root.cert) == nil && a.now().Add(servingRenewBefore).Before(cert.NotAfter) {
		return issuer{cert, key}, nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return issuer{}, fmt.Errorf("%s issuer certificate: %w", name, err)
	}
	if a.shared {
		// Shared issuers are renewed by limen proxy keys init, for every
		// proxy at once; until they expire this one keeps serving.
		if err == nil && samePublicKey(cert.PublicKey, key.Public()) && cert.CheckSignatureFrom(a.root.cert) == nil &&
			a.now().Before(cert.NotAfter) {
			log.Warn("shared certificate issuer expires soon: run limen proxy keys init on the ca-dir and roll it out",
				"name", name, "path", certPath, "not_after", cert.NotAfter)
			return issuer{cert, key}, nil
		}
		return issuer{}, errSharedMissing(certPath)
	}
	cert, err = a.signIssuer(name, key)
	if err != nil {
		return issuer{}, err
	}
	if err := WriteFileAtomic(certPath, CertPEM(cert.Raw), 0o644); err != nil {
		return issuer{}, err
	}
	log.Info("generated certificate issuer", "name", name, "path", certPath)
	return issuer{cert, key}, nil
}

func (a *Authority) loadServing(dir string, opts Options, log *slog.Logger) (tls.Certificate, error) {
	if opts.TLSCertFile != "" {
		c, err := tls.LoadX509KeyPair(opts.TLSCertFile, opts.TLSKeyFile)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("tls-cert/tls-key: %w", err)
		}
		return c, nil
	}
	names := servingNames(append([]string{"localhost", "127.0.0.1"}, opts.ServerNames...))
	certPath, keyPath := filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	key, _, err := loadOrCreateKey(keyPath, genECDSA)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("serving key: %w", err)
	}
	cert, err := readCert(certPath)
	if err == nil && a.servingUsable(cert, key, names) {
		return tls.Certificate{Certificate: [][]byte{cert.Raw, a.root.cert.Raw}, PrivateKey: key, Leaf: cert}, nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return tls.Certificate{}, fmt.Errorf("serving certificate: %w", err)
	}
	cert, err = a.signServing(key, names)
	if err != nil {
		return tls.Certificate{}, err
	}
	if err := WriteFileAtomic(certPath, CertPEM(cert.Raw), 0o644); err != nil {
		return tls.Certificate{}, err
	}
	log.Info("generated TLS serving certificate", "path", certPath, "names", names)
	return tls.Certificate{Certificate: [][]byte{cert.Raw, a.root.cert.Raw}, PrivateKey: key, Leaf: cert}, nil
}

// servingNames adds to each of the proxy's names the wildcard that routes to
// a cluster by TLS server name, "*.kube.NAME" (kpath.ServerName): one
// wildcard rather than a name per cluster, because clusters come and go
// without the proxy restarting (a worker enrolls for a new one; policy
// names them), and because a certificate listing every cluster would tell
// them to anyone who connects. A wildcard covers exactly one DNS label,
// which is what a cluster name is (kpath.ValidCluster). For an IP address
// the wildcard is a DNS name too ("*.kube.127.0.0.1"): clients send the
// server name the kubeconfig's tls-server-name sets, so no DNS record is
// needed.
func servingNames(names []string) []string {
	out := slices.Clone(names)
	for _, n := range names {
		out = append(out, "*."+kpath.ServerNameLabel+"."+strings.ToLower(n))
	}
	return out
}

func (a *Authority) servingUsable(cert *x509.Certificate, key crypto.Signer, names []string) bool {
	if !samePublicKey(cert.PublicKey, key.Public()) || cert.CheckSignatureFrom(a.root.cert) != nil {
		return false
	}
	if !a.now().Add(servingRenewBefore).Before(cert.NotAfter) {
		return false
	}
	for _, n := range names {
		// A wildcard is checked through a name it must cover.
		if cert.VerifyHostname(strings.Replace(n, "*", "cluster", 1)) != nil {
			return false
		}
	}
	return true
}

func samePublicKey(a, b crypto.PublicKey) bool {
	type eq interface{ Equal(crypto.PublicKey) bool }
	ea, ok := a.(eq)
	return ok && ea.Equal(b)
}

// RootCert is the CA certificate clients and workers trust.
func (a *Authority) RootCert() *x509.Certificate { return a.root.cert }

// RootPEM is RootCert in PEM form.
func (a *Authority) RootPEM() []byte { return CertPEM(a.root.cert.Raw) }

// Fingerprint is the root's SHA-256 fingerprint, as `limen proxy` prints it
// and join tokens carry it.
func (a *Authority) Fingerprint() string { return Fingerprint(a.root.cert) }

// ServingCertificate is the proxy's TLS certificate chain and key.
func (a *Authority) ServingCertificate() tls.Certificate { return a.serving }

// GrantSigningKey is the Ed25519 key the proxy signs grants with. It is
// generated in DataDir/ca/grant.key on first start, or read from KeysDir.
func (a *Authority) GrantSigningKey() ed25519.PrivateKey { return a.grantKey }

// GrantPublicKey is the key workers receive at enrollment to verify grants.
func (a *Authority) GrantPublicKey() ed25519.PublicKey {
	return a.grantKey.Public().(ed25519.PublicKey)
}

// UserCertTTL is the configured lifetime of user certificates.
func (a *Authority) UserCertTTL() time.Duration { return a.userTTL }

// ClientCAs is the pool of the two issuers whose certificates the proxy
// accepts from TLS clients.
func (a *Authority) ClientCAs() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(a.user.cert)
	p.AddCert(a.worker.cert)
	return p
}

// ServerTLSConfig is the proxy's TLS configuration: TLS 1.3 only, the
// serving certificate, and client certificates requested but not required
// (login and enrollment happen before the client has one). Callers may
// extend NextProtos (for example with the tunnel's ALPN).
func (a *Authority) ServerTLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{a.serving},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    a.ClientCAs(),
		NextProtos:   []string{"h2", "http/1.1"},
	}
}

func isIssuedBy(chain []*x509.Certificate, is issuer) bool {
	return len(chain) >= 2 && bytes.Equal(chain[len(chain)-1].Raw, is.cert.Raw)
}

// WorkerIssuer is the intermediate that signs worker certificates; the
// proxy sends it with a worker certificate so the worker can verify the
// chain to the root.
func (a *Authority) WorkerIssuer() *x509.Certificate { return a.worker.cert }
