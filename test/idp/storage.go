package idp

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"errors"
	"slices"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// storage is the provider's state, in memory: the op package asks it for
// clients, auth requests, device codes, users and the signing key.
type storage struct {
	mu       sync.Mutex
	key      *rsa.PrivateKey
	keyID    string
	users    map[string]*User   // by ID (the subject)
	clients  map[string]*Client // by ID
	requests map[string]*authRequest
	codes    map[string]string  // code → request ID
	devices  map[string]*device // by device code
	tokens   map[string]string  // access token ID → subject
}

type device struct {
	code, userCode string
	state          op.DeviceAuthorizationState
}

var errNotFound = errors.New("not found")

func newStorage() (*storage, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	return &storage{key: key, keyID: randomID(), users: map[string]*User{}, clients: map[string]*Client{},
		requests: map[string]*authRequest{}, codes: map[string]string{}, devices: map[string]*device{}, tokens: map[string]string{}}, nil
}

func randomID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// authRequest is one authorization request of the code flow.
type authRequest struct {
	id, clientID, redirectURI, state, nonce, subject string
	scopes                                           []string
	challenge                                        *oidc.CodeChallenge
	responseType                                     oidc.ResponseType
	responseMode                                     oidc.ResponseMode
	authTime                                         time.Time
	done                                             bool
}

func (a *authRequest) GetID() string                         { return a.id }
func (a *authRequest) GetACR() string                        { return "" }
func (a *authRequest) GetAMR() []string                      { return []string{"pwd"} }
func (a *authRequest) GetAudience() []string                 { return []string{a.clientID} }
func (a *authRequest) GetAuthTime() time.Time                { return a.authTime }
func (a *authRequest) GetClientID() string                   { return a.clientID }
func (a *authRequest) GetCodeChallenge() *oidc.CodeChallenge { return a.challenge }
func (a *authRequest) GetNonce() string                      { return a.nonce }
func (a *authRequest) GetRedirectURI() string                { return a.redirectURI }
func (a *authRequest) GetResponseType() oidc.ResponseType    { return a.responseType }
func (a *authRequest) GetResponseMode() oidc.ResponseMode    { return a.responseMode }
func (a *authRequest) GetScopes() []string                   { return a.scopes }
func (a *authRequest) GetState() string                      { return a.state }
func (a *authRequest) GetSubject() string                    { return a.subject }
func (a *authRequest) Done() bool                            { return a.done }

func (s *storage) CreateAuthRequest(_ context.Context, r *oidc.AuthRequest, _ string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := &authRequest{id: randomID(), clientID: r.ClientID, redirectURI: r.RedirectURI, state: r.State, nonce: r.Nonce,
		scopes: r.Scopes, responseType: r.ResponseType, responseMode: r.ResponseMode}
	if r.CodeChallenge != "" {
		a.challenge = &oidc.CodeChallenge{Challenge: r.CodeChallenge, Method: r.CodeChallengeMethod}
	}
	s.requests[a.id] = a
	return a, nil
}

func (s *storage) AuthRequestByID(_ context.Context, id string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.requests[id]
	if !ok {
		return nil, errNotFound
	}
	return a, nil
}

func (s *storage) AuthRequestByCode(ctx context.Context, code string) (op.AuthRequest, error) {
	s.mu.Lock()
	id, ok := s.codes[code]
	s.mu.Unlock()
	if !ok {
		return nil, errNotFound
	}
	return s.AuthRequestByID(ctx, id)
}

func (s *storage) SaveAuthCode(_ context.Context, id, code string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.codes[code] = id
	return nil
}

func (s *storage) DeleteAuthRequest(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.requests, id)
	for c, rid := range s.codes {
		if rid == id {
			delete(s.codes, c)
		}
	}
	return nil
}

// completeLogin marks an auth request as signed in by a known user.
func (s *storage) completeLogin(id, email, password string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.userByLogin(email, password)
	if u == nil {
		return errors.New("unknown user or wrong password")
	}
	a, ok := s.requests[id]
	if !ok {
		return errors.New("unknown or finished login request")
	}
	a.subject, a.authTime, a.done = u.ID, time.Now(), true
	return nil
}

func (s *storage) userByLogin(email, password string) *User {
	for _, u := range s.users {
		if u.Email == email && u.Password == password {
			return u
		}
	}
	return nil
}

func (s *storage) CreateAccessToken(_ context.Context, r op.TokenRequest) (string, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := randomID()
	s.tokens[id] = r.GetSubject()
	return id, time.Now().Add(5 * time.Minute), nil
}

func (s *storage) CreateAccessAndRefreshTokens(context.Context, op.TokenRequest, string) (string, string, time.Time, error) {
	return "", "", time.Time{}, errors.New("the test IdP issues no refresh tokens")
}

func (s *storage) TokenRequestByRefreshToken(context.Context, string) (op.RefreshTokenRequest, error) {
	return nil, op.ErrInvalidRefreshToken
}

func (s *storage) TerminateSession(context.Context, string, string) error { return nil }

func (s *storage) RevokeToken(context.Context, string, string, string) *oidc.Error { return nil }

func (s *storage) GetRefreshTokenInfo(context.Context, string, string) (string, string, error) {
	return "", "", op.ErrInvalidRefreshToken
}

type signingKey struct {
	id  string
	key *rsa.PrivateKey
}

func (k signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k signingKey) Key() any                                    { return k.key }
func (k signingKey) ID() string                                  { return k.id }

type publicKey struct{ signingKey }

func (k publicKey) Algorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k publicKey) Use() string                        { return "sig" }
func (k publicKey) Key() any                           { return &k.key.PublicKey }

func (s *storage) SigningKey(context.Context) (op.SigningKey, error) {
	return signingKey{id: s.keyID, key: s.key}, nil
}

func (s *storage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

func (s *storage) KeySet(context.Context) ([]op.Key, error) {
	return []op.Key{publicKey{signingKey{id: s.keyID, key: s.key}}}, nil
}

func (s *storage) GetClientByClientID(_ context.Context, id string) (op.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clients[id]
	if !ok {
		return nil, errNotFound
	}
	return c, nil
}

func (s *storage) AuthorizeClientIDSecret(_ context.Context, id, secret string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.clients[id]; ok && c.Secret != "" && c.Secret == secret {
		return nil
	}
	return errors.New("unknown client or wrong secret")
}

func (s *storage) SetUserinfoFromScopes(context.Context, *oidc.UserInfo, string, string, []string) error {
	return nil
}

// SetUserinfoFromRequest fills the ID token's user claims. A user removed
// since the login started gets no token.
func (s *storage) SetUserinfoFromRequest(_ context.Context, info *oidc.UserInfo, r op.IDTokenRequest, scopes []string) error {
	return s.userinfo(info, r.GetSubject(), scopes)
}

func (s *storage) SetUserinfoFromToken(_ context.Context, info *oidc.UserInfo, tokenID, subject, _ string) error {
	return s.userinfo(info, subject, []string{oidc.ScopeEmail, oidc.ScopeProfile, "groups"})
}

func (s *storage) userinfo(info *oidc.UserInfo, subject string, scopes []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.users[subject]
	if !ok {
		return errors.New("the user no longer exists")
	}
	info.Subject = u.ID
	if slices.Contains(scopes, oidc.ScopeEmail) {
		info.Email, info.EmailVerified = u.Email, oidc.Bool(!u.EmailUnverified)
	}
	if slices.Contains(scopes, oidc.ScopeProfile) {
		info.PreferredUsername = u.Email
		if u.PreferredUsername != "" {
			info.PreferredUsername = u.PreferredUsername
		}
	}
	if slices.Contains(scopes, "groups") {
		info.AppendClaims("groups", slices.Clone(u.Groups))
	}
	return nil
}

func (s *storage) SetIntrospectionFromToken(context.Context, *oidc.IntrospectionResponse, string, string, string) error {
	return nil
}

func (s *storage) GetPrivateClaimsFromScopes(context.Context, string, string, []string) (map[string]any, error) {
	return nil, nil
}

func (s *storage) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errors.New("the test IdP does not support JWT client authentication")
}

func (s *storage) ValidateJWTProfileScopes(_ context.Context, _ string, scopes []string) ([]string, error) {
	return scopes, nil
}

func (s *storage) Health(context.Context) error { return nil }

func (s *storage) StoreDeviceAuthorization(_ context.Context, clientID, code, userCode string, expires time.Time, scopes []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.devices {
		if d.userCode == userCode {
			return op.ErrDuplicateUserCode
		}
	}
	s.devices[code] = &device{code: code, userCode: userCode, state: op.DeviceAuthorizationState{
		ClientID: clientID, Audience: []string{clientID}, Scopes: scopes, Expires: expires}}
	return nil
}

func (s *storage) GetDeviceAuthorizatonState(_ context.Context, clientID, code string) (*op.DeviceAuthorizationState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.devices[code]
	if !ok || d.state.ClientID != clientID {
		return nil, errNotFound
	}
	st := d.state
	return &st, nil
}

// approveDevice signs a user in for a device code's user code.
func (s *storage) approveDevice(userCode, email, password string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.userByLogin(email, password)
	if u == nil {
		return errors.New("unknown user or wrong password")
	}
	for _, d := range s.devices {
		if d.userCode == userCode && !d.state.Done && time.Now().Before(d.state.Expires) {
			d.state.Done, d.state.Subject, d.state.AuthTime, d.state.AMR = true, u.ID, time.Now(), []string{"pwd"}
			return nil
		}
	}
	return errors.New("unknown or expired user code")
}
