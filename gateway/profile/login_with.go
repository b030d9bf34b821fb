package profile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/limenhq/limen/gateway/authapi"
	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/internal/apihttp"
)

// LoginFunc asks the proxy for a certificate over csr (PEM), through
// whichever login endpoint fits: OIDC, device, bot secret, CI token.
type LoginFunc func(ctx context.Context, c *authapi.Client, csr, ttl string) (authapi.LoginResponse, error)

// LoginWith is Login for the other ways to prove who one is: it makes the
// key pair here, lets login send only the certificate request, checks the
// answer and stores key, certificate and CA.
func (p *Profile) LoginWith(ctx context.Context, trust Trust, ttl time.Duration, login LoginFunc) (*authapi.LoginResponse, error) {
	return p.loginAs(ctx, trust, ttl, "limen", login)
}

// loginAs is every login's part here: a key pair made locally, a
// certificate request for subject sent through login, the answer checked
// against the key, and key, certificate and CA stored.
func (p *Profile) loginAs(ctx context.Context, trust Trust, ttl time.Duration, subject string, login LoginFunc) (*authapi.LoginResponse, error) {
	cfg, caToStore, err := p.trustConfig(trust)
	if err != nil {
		return nil, err
	}
	key, err := ca.NewKey()
	if err != nil {
		return nil, err
	}
	csr, err := ca.NewCSR(key, subject)
	if err != nil {
		return nil, err
	}
	var ttlText string
	if ttl > 0 {
		ttlText = ttl.String()
	}
	client := &authapi.Client{Client: apihttp.Client{Proxy: p.Proxy, HTTP: httpClient(cfg)}}
	resp, err := login(ctx, client, string(csr), ttlText)
	if err != nil {
		return nil, fmt.Errorf("login to %s: %w", p.Proxy, err)
	}
	certs, err := ca.ParseCertsPEM([]byte(resp.Certificate))
	if err != nil {
		return nil, fmt.Errorf("login to %s: certificate: %w", p.Proxy, err)
	}
	if !key.PublicKey.Equal(certs[0].PublicKey) {
		return nil, fmt.Errorf("login to %s: the proxy returned a certificate for another key", p.Proxy)
	}
	caPEM, err := caToStore([]byte(resp.CA))
	if err != nil {
		return nil, err
	}
	keyPEM, err := ca.KeyPEM(key)
	if err != nil {
		return nil, err
	}
	if err := p.SaveCredentials(keyPEM, []byte(resp.Certificate), caPEM); err != nil {
		return nil, err
	}
	return &resp, nil
}

// FileBot records how a bot logged in, so that the kubectl plugin can log
// it in again without a person.
const FileBot = "bot.json"

// BotLogin is how a bot logs in: its name and the file holding its join
// secret or its CI ID token (read afresh at each renewal, so a CI job can
// replace an expiring token).
type BotLogin struct {
	Bot         string `json:"bot"`
	TokenFile   string `json:"token_file,omitempty"`
	IDTokenFile string `json:"id_token_file,omitempty"`
	// TTL is the certificate lifetime the login asked for; renewals ask
	// for it again (0: the proxy's maximum).
	TTL time.Duration `json:"ttl,omitempty"`
}

// SaveBotLogin records b (its files as absolute paths).
func (p *Profile) SaveBotLogin(b BotLogin) error {
	for _, f := range []*string{&b.TokenFile, &b.IDTokenFile} {
		if *f != "" {
			abs, err := filepath.Abs(*f)
			if err != nil {
				return err
			}
			*f = abs
		}
	}
	data, err := json.Marshal(b)
	if err != nil {
		return err
	}
	if err := p.Ensure(); err != nil {
		return err
	}
	return ca.WriteFileAtomic(p.path(FileBot), data, 0o600)
}

// BotLogin returns the recorded bot login, or nil when there is none.
func (p *Profile) BotLogin() (*BotLogin, error) {
	data, err := readPrivate(p.path(FileBot))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var b BotLogin
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("%s: %w", p.path(FileBot), err)
	}
	return &b, nil
}

// ForgetBotLogin removes the record; a person logging in calls it.
func (p *Profile) ForgetBotLogin() error {
	if err := os.Remove(p.path(FileBot)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
