package ca

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/identity"
)

func openCA(t *testing.T, opts Options) *Authority {
	t.Helper()
	if opts.DataDir == "" {
		opts.DataDir = t.TempDir()
	}
	opts.Logger = slog.New(slog.DiscardHandler)
	a, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestOpenPersistsAndProtectsKeys(t *testing.T) {
	dir := t.TempDir()
	a := openCA(t, Options{DataDir: dir})
	b := openCA(t, Options{DataDir: dir})
	if a.Fingerprint() != b.Fingerprint() || !a.GrantPublicKey().Equal(b.GrantPublicKey()) {
		t.Fatal("second Open generated a new CA or grant key instead of loading the stored ones")
	}
	for _, name := range []string{"root.key", "user.key", "worker.key", "server.key", "grant.key"} {
		fi, err := os.Stat(filepath.Join(dir, "ca", name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", name, fi.Mode().Perm())
		}
	}
	if a.user.cert.Equal(a.worker.cert) || samePublicKey(a.user.key.Public(), a.worker.key.Public()) {
		t.Fatal("user and worker issuers share a key")
	}
	leaf := a.ServingCertificate().Leaf
	for _, n := range []string{"localhost", "127.0.0.1"} {
		if err := leaf.VerifyHostname(n); err != nil {
			t.Errorf("serving certificate: %v", err)
		}
	}
}

func TestOpenValidation(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		opts Options
		want string
	}{
		{Options{}, "data-dir"},
		{Options{DataDir: dir, CACertFile: "x"}, "ca-cert and ca-key"},
		{Options{DataDir: dir, TLSKeyFile: "x"}, "tls-cert and tls-key"},
		{Options{DataDir: dir, UserCertTTL: 25 * time.Hour}, "user-cert-ttl"},
		{Options{DataDir: dir, UserCertTTL: time.Second}, "user-cert-ttl"},
		{Options{DataDir: dir, CACertFile: "/nonexistent", CAKeyFile: "/nonexistent"}, "ca-cert"},
	} {
		if _, err := Open(tt.opts); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Open(%+v) = %v, want an error naming %q", tt.opts, err, tt.want)
		}
	}
}

func TestOperatorCA(t *testing.T) {
	op := openCA(t, Options{})
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "op.crt"), filepath.Join(dir, "op.key")
	keyPEM, _ := KeyPEM(op.root.key)
	os.WriteFile(certFile, op.RootPEM(), 0o644)
	os.WriteFile(keyFile, keyPEM, 0o600)
	a := openCA(t, Options{CACertFile: certFile, CAKeyFile: keyFile})
	if a.Fingerprint() != op.Fingerprint() {
		t.Fatal("operator CA not used")
	}
	if err := a.user.cert.CheckSignatureFrom(op.root.cert); err != nil {
		t.Fatalf("user issuer not signed by the operator CA: %v", err)
	}
	// A key that does not belong to the certificate is refused.
	other := openCA(t, Options{})
	otherKey, _ := KeyPEM(other.root.key)
	os.WriteFile(keyFile, otherKey, 0o600)
	if _, err := Open(Options{Logger: slog.New(slog.DiscardHandler), DataDir: t.TempDir(), CACertFile: certFile, CAKeyFile: keyFile}); err == nil {
		t.Fatal("mismatched operator CA key accepted")
	}
}

// serve runs an HTTPS server with a's TLS config that reports the principal
// or worker cluster of each caller.
func serve(t *testing.T, a *Authority) *httptest.Server {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, err := a.PrincipalFromRequest(r); err == nil {
			w.Write([]byte("user " + p.String()))
			return
		} else if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
			if c, err2 := a.ClusterFromChains(r.TLS.VerifiedChains); err2 == nil {
				w.Write([]byte("worker " + c))
				return
			}
			http.Error(w, err.Error(), 403)
			return
		}
		http.Error(w, "anonymous", 401)
	}))
	srv.TLS = a.ServerTLSConfig()
	srv.Config.ErrorLog = slog.NewLogLogger(slog.DiscardHandler, slog.LevelError)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, a *Authority, url string, cert *x509.Certificate, key any) (string, error) {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(a.RootCert())
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS13}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key}}
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b := make([]byte, 512)
	n, _ := resp.Body.Read(b)
	return strings.TrimSpace(string(b[:n])), nil
}

func TestClientCertificatesOverTLS(t *testing.T) {
	a := openCA(t, Options{UserCertTTL: time.Hour})
	srv := serve(t, a)
	key, _ := NewKey()
	alice := identity.Principal{Kind: identity.KindUser, Name: "alice", Traits: map[string][]string{"groups": {"dev"}}}
	uc, err := a.IssueUser(key.Public(), alice, 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if d := uc.NotAfter.Sub(uc.NotBefore); d > time.Hour+2*clockSkew {
		t.Fatalf("requested 48h, configured 1h, got %s", d)
	}
	wc, err := a.IssueWorker(key.Public(), "prod")
	if err != nil {
		t.Fatal(err)
	}
	// A certificate whose extension is well signed but malformed.
	bad, err := a.sign(&x509.Certificate{Subject: pkix.Name{CommonName: "alice"}, NotBefore: time.Now().Add(-time.Minute),
		NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		ExtraExtensions: []pkix.Extension{{Id: OIDPrincipal, Value: []byte{0x30, 0x00}}}}, a.user, key.Public())
	if err != nil {
		t.Fatal(err)
	}
	// A certificate whose subject disagrees with the principal.
	ext, _ := EncodePrincipal(identity.Principal{Kind: identity.KindUser, Name: "root-user"})
	mismatch, _ := a.sign(&x509.Certificate{Subject: pkix.Name{CommonName: "alice"}, NotBefore: time.Now().Add(-time.Minute),
		NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		ExtraExtensions: []pkix.Extension{{Id: OIDPrincipal, Value: ext}}}, a.user, key.Public())
	// The same principal signed by a foreign CA.
	foreign := openCA(t, Options{})
	fc, _ := foreign.IssueUser(key.Public(), alice, 0)
	expiredCA := &Authority{user: a.user, userTTL: time.Hour, now: func() time.Time { return time.Now().Add(-3 * time.Hour) }}
	expired, _ := expiredCA.IssueUser(key.Public(), alice, 0)

	tests := []struct {
		name    string
		cert    *x509.Certificate
		want    string
		wantErr bool
	}{
		{"no certificate", nil, "anonymous", false},
		{"user", uc, "user user:alice", false},
		{"worker", wc, "worker prod", false},
		{"malformed extension", bad, "limen certificate extension", false},
		{"name mismatch", mismatch, "does not match subject", false},
		{"foreign CA", fc, "", true},
		{"expired", expired, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := get(t, a, srv.URL, tt.cert, key)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("TLS accepted the certificate: %q", got)
				}
				return
			}
			if err != nil || !strings.Contains(got, tt.want) {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestVerifyUserCertAndKinds(t *testing.T) {
	a := openCA(t, Options{})
	key, _ := NewKey()
	wc, _ := a.IssueWorker(key.Public(), "prod")
	if _, err := a.VerifyUserCert(wc); err == nil {
		t.Fatal("worker certificate accepted as a user certificate")
	}
	if _, err := a.ClusterFromChains([][]*x509.Certificate{{wc, a.user.cert}}); !errors.Is(err, ErrWrongIssuer) {
		t.Fatalf("worker cert with user chain: %v, want ErrWrongIssuer", err)
	}
	if _, err := a.PrincipalFromChains(nil); !errors.Is(err, ErrNoClientCert) {
		t.Fatalf("no chains: %v", err)
	}
	if _, err := a.IssueUser(key.Public(), identity.Principal{Kind: identity.KindUser, Name: "system:x"}, 0); err == nil {
		t.Fatal("issued a certificate for a system: name")
	}
	if _, err := a.IssueWorker(key.Public(), "../x"); err == nil {
		t.Fatal("issued a worker certificate for a bad cluster name")
	}
}

func TestCSR(t *testing.T) {
	key, _ := NewKey()
	p, err := NewCSR(key, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseCSR(p); err != nil {
		t.Fatal(err)
	}
	tampered := []byte(strings.Replace(string(p), "A", "B", 1))
	for name, in := range map[string][]byte{"empty": nil, "cert block": CertPEM([]byte{1}), "tampered": tampered, "huge": make([]byte, 20<<10)} {
		if _, err := ParseCSR(in); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
