package ca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"

	"github.com/limenhq/limen/gateway/identity"
)

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func (a *Authority) sign(tmpl *x509.Certificate, parent issuer, pub crypto.PublicKey) (*x509.Certificate, error) {
	sn, err := serial()
	if err != nil {
		return nil, fmt.Errorf("certificate serial: %w", err)
	}
	tmpl.SerialNumber = sn
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent.cert, pub, parent.key)
	if err != nil {
		return nil, fmt.Errorf("sign certificate for %q: %w", tmpl.Subject.CommonName, err)
	}
	return x509.ParseCertificate(der)
}

func (a *Authority) selfSign(key crypto.Signer) (*x509.Certificate, error) {
	now := a.now()
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "Limen root CA", Organization: []string{"Limen"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(rootTTL),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            1,
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = sn
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-sign root CA: %w", err)
	}
	return x509.ParseCertificate(der)
}

func (a *Authority) signIssuer(name string, key crypto.Signer) (*x509.Certificate, error) {
	now := a.now()
	notAfter := now.Add(issuerTTL)
	if notAfter.After(a.root.cert.NotAfter) {
		notAfter = a.root.cert.NotAfter
	}
	return a.sign(&x509.Certificate{
		Subject:               pkix.Name{CommonName: "Limen " + name + " issuer", Organization: []string{"Limen"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}, a.root, key.Public())
}

func (a *Authority) signServing(key crypto.Signer, names []string) (*x509.Certificate, error) {
	now := a.now()
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "Limen proxy", Organization: []string{"Limen"}},
		NotBefore:   now.Add(-clockSkew),
		NotAfter:    now.Add(servingTTL),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	return a.sign(tmpl, a.root, key.Public())
}

// IssueUser signs a client certificate for principal p over pub. ttl 0 or
// above the configured user TTL is the configured TTL. The principal goes
// into the OIDPrincipal extension; the subject's common name is its name.
func (a *Authority) IssueUser(pub crypto.PublicKey, p identity.Principal, ttl time.Duration) (*x509.Certificate, error) {
	if err := CheckPublicKey(pub); err != nil {
		return nil, err
	}
	ext, err := EncodePrincipal(p)
	if err != nil {
		return nil, fmt.Errorf("issue certificate: %w", err)
	}
	exts := []pkix.Extension{{Id: OIDPrincipal, Value: ext}}
	if len(p.Requests) > 0 {
		rext, err := EncodeRequests(p.Requests)
		if err != nil {
			return nil, fmt.Errorf("issue certificate: %w", err)
		}
		exts = append(exts, pkix.Extension{Id: OIDRequests, Value: rext})
	}
	if ttl <= 0 || ttl > a.userTTL {
		ttl = a.userTTL
	}
	now := a.now()
	return a.sign(&x509.Certificate{
		Subject:         pkix.Name{CommonName: p.Name, Organization: []string{"Limen " + string(p.Kind)}},
		NotBefore:       now.Add(-clockSkew),
		NotAfter:        now.Add(ttl),
		KeyUsage:        x509.KeyUsageDigitalSignature,
		ExtKeyUsage:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		ExtraExtensions: exts,
	}, a.user, pub)
}

// IssueWorker signs a worker certificate over pub, bound to cluster by the
// OIDWorkerCluster extension.
func (a *Authority) IssueWorker(pub crypto.PublicKey, cluster string) (*x509.Certificate, error) {
	if err := CheckPublicKey(pub); err != nil {
		return nil, err
	}
	ext, err := EncodeWorkerCluster(cluster)
	if err != nil {
		return nil, fmt.Errorf("issue worker certificate: %w", err)
	}
	now := a.now()
	return a.sign(&x509.Certificate{
		Subject:         pkix.Name{CommonName: "worker:" + cluster, Organization: []string{"Limen worker"}},
		NotBefore:       now.Add(-clockSkew),
		NotAfter:        now.Add(a.workerTTL),
		KeyUsage:        x509.KeyUsageDigitalSignature,
		ExtKeyUsage:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		ExtraExtensions: []pkix.Extension{{Id: OIDWorkerCluster, Value: ext}},
	}, a.worker, pub)
}

// CheckPublicKey accepts ECDSA P-256/P-384, Ed25519 and RSA of at least
// 2048 bits, the keys every TLS 1.3 client can sign with.
func CheckPublicKey(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() || k.Curve == elliptic.P384() {
			return nil
		}
		return fmt.Errorf("ECDSA curve %s is not accepted: use P-256 or P-384", k.Curve.Params().Name)
	case ed25519.PublicKey:
		return nil
	case *rsa.PublicKey:
		if k.N.BitLen() >= 2048 {
			return nil
		}
		return fmt.Errorf("RSA key of %d bits is too small: use at least 2048", k.N.BitLen())
	default:
		return fmt.Errorf("public key type %T is not accepted", pub)
	}
}

// ParseCSR decodes a PEM certificate request and checks its self-signature,
// which proves the requester holds the private key. Only the public key is
// used; the CA decides everything else in the certificate.
func ParseCSR(pemData []byte) (*x509.CertificateRequest, error) {
	if len(pemData) > 16<<10 {
		return nil, errors.New("certificate request is larger than 16 KiB")
	}
	b, _ := pem.Decode(pemData)
	if b == nil || b.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("certificate request must be one PEM \"CERTIFICATE REQUEST\" block")
	}
	csr, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse certificate request: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("certificate request signature: %w", err)
	}
	if err := CheckPublicKey(csr.PublicKey); err != nil {
		return nil, err
	}
	return csr, nil
}

// NewCSR makes a PEM certificate request for key, as clients send it.
func NewCSR(key crypto.Signer, commonName string) ([]byte, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: commonName},
	}, key)
	if err != nil {
		return nil, fmt.Errorf("create certificate request: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}
