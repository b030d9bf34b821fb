package profile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/requestapi"
	"github.com/limenhq/limen/gateway/requests"
)

// FileRequests lists the access requests made from this profile (limen
// request), which the kubectl plugin asks the proxy to put in its next
// certificate once they are approved.
const FileRequests = "requests.json"

// elevatedDir holds the certificate that carries approved requests.
func (p *Profile) elevatedDir() string { return filepath.Join(p.Dir, "elevated") }

// RequestIDs returns the ids of the requests made from this profile that
// have not ended, as far as the profile knows.
func (p *Profile) RequestIDs() ([]string, error) {
	data, err := readPrivate(p.path(FileRequests))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	if err := json.Unmarshal(data, &ids); err != nil {
		return nil, fmt.Errorf("%s is damaged (%v): delete it and run limen requests ls", p.path(FileRequests), err)
	}
	return ids, nil
}

// AddRequestID remembers a request made from this profile.
func (p *Profile) AddRequestID(id string) error {
	ids, err := p.RequestIDs()
	if err != nil {
		return err
	}
	if !slices.Contains(ids, id) {
		ids = append(ids, id)
	}
	return p.setRequestIDs(ids)
}

func (p *Profile) setRequestIDs(ids []string) error {
	if len(ids) > identity.MaxElevations {
		ids = ids[len(ids)-identity.MaxElevations:] // the newest
	}
	data, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	return ca.WriteFileAtomic(p.path(FileRequests), data, 0o600)
}

// ElevatedCredentials are what the kubectl plugin prints: login, the login
// certificate, when no request was made from this profile; otherwise one
// the proxy issued against it carrying the approved ones. The stored one
// serves while it carries every remembered request and none has expired;
// otherwise the proxy is asked again, and the requests it reports ended
// (denied, expired, unknown) are forgotten. warn receives what the user
// should know (the proxy could not be asked).
func (p *Profile) ElevatedCredentials(ctx context.Context, login *Credentials, now time.Time, warn func(string)) (*Credentials, error) {
	ids, err := p.RequestIDs()
	if err != nil || len(ids) == 0 {
		return login, err
	}
	dir := p.elevatedDir()
	if c, err := p.storedApp(dir, now); err == nil && c.Principal.LoginID == login.Principal.LoginID &&
		c.Principal.Name == login.Principal.Name && carriesAll(c.Principal, ids, now) && now.Add(appRenewBefore).Before(c.Cert.NotAfter) {
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
	rc := &requestapi.Client{Client: api.Client}
	resp, err := rc.Certificate(ctx, requestapi.CertificateRequest{CSR: string(csr), IDs: ids})
	if err != nil {
		warn(fmt.Sprintf("limen: could not ask the proxy for your access requests (%v); using your login certificate", err))
		return login, nil
	}
	var keep []string
	for _, r := range resp.Requests {
		if r.State == requests.StatePending || (r.State == requests.StateApproved && now.Before(r.Expires)) {
			keep = append(keep, r.ID)
		}
	}
	if err := p.setRequestIDs(keep); err != nil {
		return nil, err
	}
	keyPEM, err := ca.KeyPEM(key)
	if err != nil {
		return nil, err
	}
	c, err := p.parseCredentials(keyPEM, []byte(resp.Certificate), now)
	if err != nil {
		return nil, err
	}
	if !key.PublicKey.Equal(c.Cert.PublicKey) || !c.Principal.Same(login.Principal) {
		return nil, errors.New("access request certificate: the proxy returned one for another key or principal")
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

// carriesAll reports whether p carries every request of ids, none expired
// at now: a pending request is not carried, so the proxy is asked again.
func carriesAll(p identity.Principal, ids []string, now time.Time) bool {
	for _, id := range ids {
		i := slices.IndexFunc(p.Requests, func(e identity.Elevation) bool { return e.Request == id })
		if i < 0 || !now.Before(p.Requests[i].Expires) {
			return false
		}
	}
	return true
}

// RemoveRequests forgets the requests and their certificate (limen logout).
func (p *Profile) RemoveRequests() error {
	if err := os.RemoveAll(p.elevatedDir()); err != nil {
		return err
	}
	if err := os.Remove(p.path(FileRequests)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
