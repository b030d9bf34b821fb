// Package idp is a real OpenID Connect provider for tests, built on
// zitadel/oidc's op package with in-memory storage: discovery, JWKS, the
// code flow with PKCE, the device flow, users with groups that tests can
// add and remove, and ID tokens for CI workloads (keyless bots). Its
// sign-in pages are plain HTML forms, so chromedp can drive them.
package idp

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/op"
)

const (
	pathLogin  = "/login"
	pathDevice = "/device"
)

// User is a person at the IdP.
type User struct {
	ID       string // the subject; set by AddUser when empty
	Email    string
	Password string
	Groups   []string
	// PreferredUsername is the preferred_username claim (the profile
	// scope); empty is Email.
	PreferredUsername string
	// EmailUnverified makes the ID token say email_verified: false.
	EmailUnverified bool
}

// IdP is a running provider.
type IdP struct {
	// URL is the issuer, http://127.0.0.1:PORT.
	URL string
	st  *storage
	srv *http.Server
	op  *op.Provider

	mu      sync.Mutex
	reshape func(claims map[string]any) // ReshapeIDTokens
}

// Start serves a provider on a free loopback port until Close.
func Start() (*IdP, error) {
	st, err := newStorage()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &IdP{URL: "http://" + ln.Addr().String(), st: st}
	var cryptoKey [32]byte
	rand.Read(cryptoKey[:])
	p.op, err = op.NewProvider(&op.Config{
		CryptoKey:      cryptoKey,
		CodeMethodS256: true,
		AuthMethodPost: true,
		DeviceAuthorization: op.DeviceAuthorizationConfig{
			Lifetime: 5 * time.Minute, PollInterval: time.Second, UserFormPath: pathDevice, UserCode: op.UserCodeBase20,
		},
	}, st, op.StaticIssuer(p.URL), op.WithAllowInsecure(), op.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("idp: %w", err)
	}
	mux := http.NewServeMux()
	issuer := op.NewIssuerInterceptor(p.op.IssuerFromRequest)
	mux.Handle(pathLogin, issuer.HandlerFunc(p.login))
	mux.HandleFunc(pathDevice, p.device)
	mux.Handle("/", p.op)
	mux.Handle(p.op.TokenEndpoint().Relative(), http.HandlerFunc(p.token))
	p.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go p.srv.Serve(ln)
	return p, nil
}

// Close stops the provider.
func (p *IdP) Close() error { return p.srv.Close() }

// AddClient registers a relying party.
func (p *IdP) AddClient(c Client) {
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	p.st.clients[c.ID] = &c
}

// AddUser adds or replaces a user (matched by email) and returns its subject.
func (p *IdP) AddUser(u User) string {
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	for id, old := range p.st.users {
		if old.Email == u.Email {
			delete(p.st.users, id)
			if u.ID == "" {
				u.ID = id
			}
		}
	}
	if u.ID == "" {
		u.ID = randomID()
	}
	p.st.users[u.ID] = &u
	return u.ID
}

// RemoveUser deletes the user with email: it can no longer sign in, and a
// login it started gets no token.
func (p *IdP) RemoveUser(email string) {
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	for id, u := range p.st.users {
		if u.Email == email {
			delete(p.st.users, id)
		}
	}
}

// WorkloadToken mints an ID token for a CI job, as a CI system's workload
// identity does: issuer p.URL, audience aud, the given claims (for example
// repository and ref; they override the standard claims), signed with the
// key the JWKS publishes. Each token has a fresh jti, as a CI system's do
// (claims may set it, or set it to nil to leave it out).
func (p *IdP) WorkloadToken(aud, subject string, claims map[string]any, ttl time.Duration) (string, error) {
	now := time.Now()
	c := map[string]any{"iss": p.URL, "sub": subject, "aud": aud, "iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(ttl).Unix(),
		"jti": randomID()}
	// claims may override the standard ones, so that tests can mint tokens
	// a CI system should never issue (several audiences, another issuer).
	for k, v := range claims {
		c[k] = v
		if v == nil {
			delete(c, k)
		}
	}
	return p.sign(c)
}

// sign signs claims with the key the JWKS publishes.
func (p *IdP) sign(claims map[string]any) (string, error) {
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: p.st.key, KeyID: p.st.keyID}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return "", err
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		return "", err
	}
	return jws.CompactSerialize()
}

// ReshapeIDTokens makes the token endpoint (code and device flow) hand out
// ID tokens whose claims f changed (a nil value is kept as JSON null),
// signed with the key the JWKS publishes: tokens the provider would never
// issue (azp a list, several audiences, another client), which Limen's
// login handlers must refuse. nil stops it.
func (p *IdP) ReshapeIDTokens(f func(claims map[string]any)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reshape = f
}

// token serves the token endpoint, reshaping the ID token it answers with
// (ReshapeIDTokens).
func (p *IdP) token(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	f := p.reshape
	p.mu.Unlock()
	if f == nil {
		p.op.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	p.op.ServeHTTP(rec, r)
	body := rec.Body.Bytes()
	var resp map[string]any
	if rec.Code == http.StatusOK && json.Unmarshal(body, &resp) == nil {
		if raw, ok := resp["id_token"].(string); ok {
			reshaped, err := p.reshaped(raw, f)
			if err != nil {
				http.Error(w, "test IdP: reshape the ID token: "+err.Error(), http.StatusInternalServerError)
				return
			}
			resp["id_token"] = reshaped
			body, _ = json.Marshal(resp)
		}
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.Header().Del("Content-Length")
	w.WriteHeader(rec.Code)
	_, _ = w.Write(body)
}

// reshaped is the ID token raw (signed by this provider) with its claims
// changed by f and signed again.
func (p *IdP) reshaped(raw string, f func(map[string]any)) (string, error) {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return "", fmt.Errorf("not a compact JWS")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", err
	}
	var claims map[string]any
	if err := json.Unmarshal(payload, &claims); err != nil {
		return "", err
	}
	f(claims)
	return p.sign(claims)
}

var page = template.Must(template.New("page").Parse(`<!doctype html>
<html><head><title>Test IdP</title></head><body>
{{if .Error}}<p id="error">{{.Error}}</p>{{end}}
{{if .Done}}<p id="done">Device approved. You can close this window.</p>{{else}}
<form method="post">
{{if .ID}}<input type="hidden" name="id" value="{{.ID}}">{{end}}
{{if .Device}}<label>Code <input id="user_code" name="user_code" value="{{.UserCode}}"></label>{{end}}
<label>Email <input id="username" name="username"></label>
<label>Password <input id="password" name="password" type="password"></label>
<button id="submit" type="submit">Sign in</button>
</form>{{end}}
</body></html>`))

type pageData struct {
	ID, UserCode, Error string
	Device, Done        bool
}

// login is the code flow's sign-in page: op sends the browser here with
// the auth request's id; on success it goes back to op's callback.
func (p *IdP) login(w http.ResponseWriter, r *http.Request) {
	id := r.FormValue("id")
	if r.Method != http.MethodPost {
		page.Execute(w, pageData{ID: id})
		return
	}
	if err := p.st.completeLogin(id, r.FormValue("username"), r.FormValue("password")); err != nil {
		w.WriteHeader(http.StatusUnauthorized)
		page.Execute(w, pageData{ID: id, Error: err.Error()})
		return
	}
	http.Redirect(w, r, op.AuthCallbackURL(p.op)(r.Context(), id), http.StatusFound)
}

// device is the device flow's verification page: the user code and a
// sign-in in one form.
func (p *IdP) device(w http.ResponseWriter, r *http.Request) {
	code := r.FormValue("user_code")
	if r.Method != http.MethodPost {
		page.Execute(w, pageData{Device: true, UserCode: code})
		return
	}
	if err := p.st.approveDevice(code, r.FormValue("username"), r.FormValue("password")); err != nil {
		w.WriteHeader(http.StatusUnauthorized)
		page.Execute(w, pageData{Device: true, UserCode: code, Error: err.Error()})
		return
	}
	page.Execute(w, pageData{Done: true})
}

// ApproveDevice approves userCode as the user would on the device page,
// for tests that do not drive a browser.
func (p *IdP) ApproveDevice(userCode, email, password string) error {
	return p.st.approveDevice(userCode, email, password)
}
