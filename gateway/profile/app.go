package profile

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/limenhq/limen/gateway/authapi"
	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/identity"
)

// appRenewBefore is how long before its expiry a stored application
// certificate is replaced, so that kubectl is never handed one about to
// lapse mid-request.
const appRenewBefore = time.Minute

// appDir holds the certificate of one application client.
func (p *Profile) appDir(client string) string { return filepath.Join(p.Dir, "apps", client) }

// AppKubeconfigPath is where `limen kube login CLUSTER --app NAME` writes
// its kubeconfig.
func (p *Profile) AppKubeconfigPath(cluster, client string) string {
	return filepath.Join(p.Dir, "kubeconfig-"+cluster+"-app-"+client+".json")
}

// AppCredentials returns a certificate bound to the application client,
// for the exec plugin: the stored one while it is valid for the same login,
// otherwise a new one the proxy issues against the command-line
// certificate, which bounds its life. Without a valid login it fails like
// Credentials: run limen login.
func (p *Profile) AppCredentials(ctx context.Context, client string, now time.Time) (*Credentials, error) {
	if err := identity.ValidClient(client); err != nil {
		return nil, fmt.Errorf("--app: %w", err)
	}
	login, err := p.Credentials(now)
	if err != nil {
		return nil, err
	}
	dir := p.appDir(client)
	if c, err := p.storedApp(dir, now); err == nil && c.Principal.ClientID == client &&
		c.Principal.Name == login.Principal.Name && c.Principal.LoginID == login.Principal.LoginID &&
		now.Add(appRenewBefore).Before(c.Cert.NotAfter) {
		return c, nil
	}
	api, err := p.Client(login)
	if err != nil {
		return nil, err
	}
	key, err := ca.NewKey()
	if err != nil {
		return nil, err
	}
	csr, err := ca.NewCSR(key, login.Principal.Name)
	if err != nil {
		return nil, err
	}
	resp, err := api.ClientCert(ctx, authapi.ClientCertRequest{Client: client, CSR: string(csr)})
	if err != nil {
		return nil, fmt.Errorf("certificate for client %s: %w", client, err)
	}
	keyPEM, err := ca.KeyPEM(key)
	if err != nil {
		return nil, err
	}
	c, err := p.parseCredentials(keyPEM, []byte(resp.Certificate), now)
	if err != nil {
		return nil, err
	}
	if !key.PublicKey.Equal(c.Cert.PublicKey) || c.Principal.ClientID != client {
		return nil, fmt.Errorf("certificate for client %s: the proxy returned one for another key or client", client)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := ca.WriteFileAtomic(filepath.Join(dir, FileKey), keyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := ca.WriteFileAtomic(filepath.Join(dir, FileCert), []byte(resp.Certificate), 0o600); err != nil {
		return nil, err
	}
	return c, nil
}

func (p *Profile) storedApp(dir string, now time.Time) (*Credentials, error) {
	if err := checkPrivate(dir, true); err != nil {
		return nil, err
	}
	keyPEM, err := readPrivate(filepath.Join(dir, FileKey))
	if err != nil {
		return nil, err
	}
	certPEM, err := readPrivate(filepath.Join(dir, FileCert))
	if err != nil {
		return nil, err
	}
	return p.parseCredentials(keyPEM, certPEM, now)
}

// RemoveApps deletes every stored application certificate (limen logout).
func (p *Profile) RemoveApps() error {
	err := os.RemoveAll(filepath.Join(p.Dir, "apps"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
