package enroll

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/internal/apihttp"
)

// Path is where the proxy serves enrollment.
const Path = "/v1/enroll"

// Request is the body a worker posts to Path.
type Request struct {
	Token   string `json:"token"`
	Cluster string `json:"cluster"`
	// CSR is a PEM certificate request; the worker's private key stays on
	// the worker.
	CSR string `json:"csr"`
}

// Response is the proxy's answer to an enrollment.
type Response struct {
	// Certificate is the PEM worker certificate followed by its issuer.
	Certificate string `json:"certificate"`
	// CA is the PEM root CA the worker pins for the tunnel.
	CA string `json:"ca"`
	// GrantPublicKey is the PEM (PKIX) Ed25519 key grants are signed with.
	GrantPublicKey string `json:"grant_public_key"`
}

// ErrNotEnrolled means the data directory holds no worker identity yet.
var ErrNotEnrolled = errors.New("worker is not enrolled: start it once with --join-token")

// WorkerIdentity is what a worker holds after enrollment.
type WorkerIdentity struct {
	// Proxy is the HOST:PORT the worker enrolled with.
	Proxy string `json:"proxy"`
	// Cluster is the cluster the certificate is bound to.
	Cluster string `json:"cluster"`
	// Certificate is the worker's client certificate chain and key.
	Certificate tls.Certificate `json:"-"`
	// CA is the proxy's root CA.
	CA *x509.Certificate `json:"-"`
	// GrantKey verifies the grants the proxy signs.
	GrantKey ed25519.PublicKey `json:"-"`
}

// NotAfter is when the worker certificate expires.
func (w *WorkerIdentity) NotAfter() time.Time { return w.Certificate.Leaf.NotAfter }

// TLSConfig is the TLS 1.3 client configuration for dialing the proxy with
// the worker certificate, trusting only the proxy's CA. Callers set
// NextProtos (the tunnel's ALPN).
func (w *WorkerIdentity) TLSConfig() *tls.Config {
	roots := x509.NewCertPool()
	roots.AddCert(w.CA)
	host, _, err := net.SplitHostPort(w.Proxy)
	if err != nil {
		host = w.Proxy
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots, ServerName: host,
		Certificates: []tls.Certificate{w.Certificate}}
}

// Options says how to enroll.
type Options struct {
	// Proxy is the proxy's HOST:PORT.
	Proxy string
	// Cluster is the cluster this worker serves; it must be the token's.
	Cluster string
	// Token is the join token as printed.
	Token string
	// DataDir receives the identity under DataDir/worker.
	DataDir string
	// Timeout bounds the exchange (0: 30 s).
	Timeout time.Duration
}

// Enroll exchanges a join token for a worker certificate, pinning the CA
// fingerprint the token carries, and stores the identity in DataDir.
func Enroll(ctx context.Context, o Options) (*WorkerIdentity, error) {
	tok, err := ParseToken(o.Token)
	if err != nil {
		return nil, err
	}
	if err := ca.ValidClusterName(o.Cluster); err != nil {
		return nil, err
	}
	host, _, err := net.SplitHostPort(o.Proxy)
	if err != nil {
		return nil, fmt.Errorf("proxy address %q: want HOST:PORT", o.Proxy)
	}
	key, err := ca.NewKey()
	if err != nil {
		return nil, err
	}
	csr, err := ca.NewCSR(key, "worker:"+o.Cluster)
	if err != nil {
		return nil, err
	}
	timeout := o.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	client := apihttp.Client{Proxy: o.Proxy, HTTP: &http.Client{Timeout: timeout,
		Transport: &http.Transport{TLSClientConfig: ca.PinnedTLSConfig(host, tok.CAFingerprint), ForceAttemptHTTP2: true}}}
	var r Response
	if err := client.Do(ctx, http.MethodPost, Path, Request{Token: tok.String(), Cluster: o.Cluster, CSR: string(csr)}, &r); err != nil {
		return nil, fmt.Errorf("enroll with %s: %w", o.Proxy, err)
	}
	keyPEM, err := ca.KeyPEM(key)
	if err != nil {
		return nil, err
	}
	w, err := parseIdentity(o.Proxy, o.Cluster, []byte(r.Certificate), keyPEM, []byte(r.CA), []byte(r.GrantPublicKey))
	if err != nil {
		return nil, fmt.Errorf("enroll with %s: %w", o.Proxy, err)
	}
	if ca.Fingerprint(w.CA) != tok.CAFingerprint {
		return nil, fmt.Errorf("enroll with %s: the proxy returned a CA other than the one the token pins", o.Proxy)
	}
	if err := save(o.DataDir, w, []byte(r.Certificate), keyPEM, []byte(r.CA), []byte(r.GrantPublicKey)); err != nil {
		return nil, err
	}
	return w, nil
}

// parseIdentity checks that the pieces fit: the chain verifies to the CA,
// the certificate is for this key and bound to this cluster.
func parseIdentity(proxy, cluster string, certPEM, keyPEM, caPEM, grantPEM []byte) (*WorkerIdentity, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("worker certificate and key: %w", err)
	}
	cas, err := ca.ParseCertsPEM(caPEM)
	if err != nil {
		return nil, fmt.Errorf("proxy CA: %w", err)
	}
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(cas[0])
	for _, d := range cert.Certificate[1:] {
		if c, err := x509.ParseCertificate(d); err == nil {
			inter.AddCert(c)
		}
	}
	// Expiry is the caller's question (LoadWorkerIdentity reports it); here
	// only the signatures matter, checked at the certificate's start.
	_, err = cert.Leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter,
		CurrentTime: cert.Leaf.NotBefore.Add(time.Second), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		return nil, fmt.Errorf("worker certificate does not verify against the proxy CA: %w", err)
	}
	got, err := workerCluster(cert.Leaf)
	if err != nil {
		return nil, err
	}
	if got != cluster {
		return nil, fmt.Errorf("worker certificate is bound to cluster %q, not %q", got, cluster)
	}
	b, _ := pem.Decode(grantPEM)
	if b == nil || b.Type != "PUBLIC KEY" {
		return nil, errors.New("grant public key: no PEM PUBLIC KEY block")
	}
	pub, err := x509.ParsePKIXPublicKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("grant public key: %w", err)
	}
	gk, ok := pub.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("grant public key is %T, want Ed25519", pub)
	}
	return &WorkerIdentity{Proxy: proxy, Cluster: cluster, Certificate: cert, CA: cas[0], GrantKey: gk}, nil
}

func workerCluster(c *x509.Certificate) (string, error) {
	for _, e := range c.Extensions {
		if e.Id.Equal(ca.OIDWorkerCluster) {
			return ca.DecodeWorkerCluster(e.Value)
		}
	}
	return "", fmt.Errorf("%w: worker certificate has no cluster", ca.ErrBadExtension)
}

// GrantPublicKeyPEM encodes the grant key as the proxy sends it.
func GrantPublicKeyPEM(k ed25519.PublicKey) []byte {
	der, _ := x509.MarshalPKIXPublicKey(k)
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// Files of a worker identity, under DataDir/worker.
const (
	workerDir    = "worker"
	fileCert     = "cert.pem"
	fileKey      = "key.pem"
	fileCA       = "ca.pem"
	fileGrant    = "grant.pub"
	fileIdentity = "identity.json"
)

func save(dataDir string, w *WorkerIdentity, certPEM, keyPEM, caPEM, grantPEM []byte) error {
	if dataDir == "" {
		return errors.New("data-dir is empty: set --data-dir or LIMEN_DATA_DIR")
	}
	dir := filepath.Join(dataDir, workerDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("store worker identity: %w", err)
	}
	meta, _ := json.Marshal(w)
	// The certificate is written last: its presence marks a complete identity.
	for _, f := range []struct {
		name string
		data []byte
	}{{fileKey, keyPEM}, {fileCA, caPEM}, {fileGrant, grantPEM}, {fileIdentity, meta}, {fileCert, certPEM}} {
		if err := ca.WriteFileAtomic(filepath.Join(dir, f.name), f.data, 0o600); err != nil {
			return fmt.Errorf("store worker identity: %w", err)
		}
	}
	return nil
}

// LoadWorkerIdentity reads the identity Enroll stored in dataDir. It returns
// ErrNotEnrolled when there is none. An expired certificate is returned
// with an error saying so, so the caller can ask for a new token.
func LoadWorkerIdentity(dataDir string) (*WorkerIdentity, error) {
	dir := filepath.Join(dataDir, workerDir)
	certPEM, err := os.ReadFile(filepath.Join(dir, fileCert))
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNotEnrolled
	}
	if err != nil {
		return nil, fmt.Errorf("load worker identity: %w", err)
	}
	read := func(name string) ([]byte, error) { return os.ReadFile(filepath.Join(dir, name)) }
	keyPEM, err1 := read(fileKey)
	caPEM, err2 := read(fileCA)
	grantPEM, err3 := read(fileGrant)
	meta, err4 := read(fileIdentity)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return nil, fmt.Errorf("load worker identity from %s: %w: remove the directory and enroll again", dir, err)
	}
	var m struct{ Proxy, Cluster string }
	if err := json.Unmarshal(meta, &m); err != nil {
		return nil, fmt.Errorf("load worker identity: %s: %w", fileIdentity, err)
	}
	w, err := parseIdentity(m.Proxy, m.Cluster, certPEM, keyPEM, caPEM, grantPEM)
	if err != nil {
		return nil, fmt.Errorf("load worker identity from %s: %w", dir, err)
	}
	if time.Now().After(w.NotAfter()) {
		return w, fmt.Errorf("worker certificate expired at %s: enroll again with a new join token", w.NotAfter().Format(time.RFC3339))
	}
	return w, nil
}
