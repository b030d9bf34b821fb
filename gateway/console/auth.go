package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/store"
	"github.com/limenhq/limen/gateway/users"
)

// Cookie names. Each is a __Host- cookie (Secure, Path=/, no Domain), so
// that no other host under the same domain and no other path can set or
// shadow it; the browser enforces the prefix's rules. The pre-sign-in
// cookie only guards the sign-in form against login CSRF.
const (
	cookieSession = "__Host-limen_console"
	cookiePre     = "__Host-limen_console_pre"
	// cookiePath is the only path a __Host- cookie may have.
	cookiePath = "/"
	// csrfField is the form field (and X-CSRF-Token the header) carrying
	// the CSRF token on every state-changing request.
	csrfField  = "csrf"
	csrfHeader = "X-CSRF-Token"
)

// signin is one signed-in browser.
type signin struct {
	p       identity.Principal
	expires time.Time
	csrf    string
	// local marks a local user's sign-in (by password), whose user must
	// still exist on every request.
	local bool
}

// signins are the console's sign-ins in a store.SignIns (in memory for the
// embedded engine, or shared by every proxy on PostgreSQL), by the
// SHA-256 of their cookie, so that the store holds no usable credential.
type signins struct{ db store.SignIns }

func digest(token string) string {
	s := sha256.Sum256([]byte(token))
	return hex.EncodeToString(s[:])
}

func randomToken() string {
	b := make([]byte, 32)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func (s signins) add(ctx context.Context, p identity.Principal, now, expires time.Time, local bool) (token string, si *signin, err error) {
	token = randomToken()
	si = &signin{p: p, expires: expires, csrf: randomToken(), local: local}
	pj, err := json.Marshal(p)
	if err != nil {
		return "", nil, err
	}
	err = s.db.Put(ctx, store.SignInRecord{Digest: digest(token), Principal: string(pj), CSRF: si.csrf, Expires: expires.UnixNano(), Local: local}, now.UnixNano())
	if err != nil {
		return "", nil, fmt.Errorf("store the sign-in: %w", err)
	}
	return token, si, nil
}

// get returns the live sign-in of token; an unreachable store is no
// sign-in (fail closed), with the error.
func (s signins) get(ctx context.Context, token string, now time.Time) (*signin, bool, error) {
	r, err := s.db.Get(ctx, digest(token), now.UnixNano())
	if errors.Is(err, store.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read the sign-in: %w", err)
	}
	si := &signin{expires: time.Unix(0, r.Expires), csrf: r.CSRF, local: r.Local}
	if err := json.Unmarshal([]byte(r.Principal), &si.p); err != nil {
		return nil, false, fmt.Errorf("stored sign-in is corrupt: %w", err)
	}
	return si, true, nil
}

func (s signins) remove(ctx context.Context, token string) error {
	return s.db.Delete(ctx, digest(token))
}

// userHandler serves a request of a signed-in, checked user.
type userHandler func(w http.ResponseWriter, r *http.Request, s *signin)

// user admits the request of a signed-in user, on every request: the
// sign-in has not expired, the user still exists, and no lock is in force
// on them. A state-changing request must also carry the sign-in's CSRF
// token. Anything else is sent to the sign-in page (a page) or refused (a
// POST, the JSON, the WebSocket).
func (h *Handler) user(next userHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, err := h.check(r)
		if err != nil {
			h.deny(r, identity.Principal{}, "console: "+err.Error())
			if r.Method == http.MethodGet && !isAPI(r) {
				http.Redirect(w, r, Prefix+"signin?"+url.Values{"why": {whySignedOut}}.Encode(), http.StatusSeeOther)
				return
			}
			h.fail(w, r, nil, http.StatusUnauthorized, err.Error()+": sign in again at "+Prefix+"signin")
			return
		}
		if err := h.lockedOrGone(r, s); err != nil {
			h.cfg.Logger.Info("console: refused a signed-in user", "user", s.p.Name, "err", err)
			h.deny(r, s.p, "console: "+err.Error())
			if code := locks.HTTPStatus(err); code != http.StatusForbidden {
				// The lock view is stale: refused for now, still signed in.
				h.fail(w, r, nil, code, err.Error())
				return
			}
			h.dropCookie(w, r)
			h.fail(w, r, nil, http.StatusForbidden, err.Error())
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if err := checkCSRF(r, s.csrf); err != nil {
				h.deny(r, s.p, "console: "+err.Error())
				h.fail(w, r, s, http.StatusForbidden, err.Error())
				return
			}
		}
		next(w, r, s)
	}
}

// page is user, and only for a user whom policy allows action.
func (h *Handler) page(action string, next userHandler) http.HandlerFunc {
	return h.user(func(w http.ResponseWriter, r *http.Request, s *signin) {
		ok, err := h.allowed(r, s.p, action)
		if err != nil {
			h.fail(w, r, s, http.StatusServiceUnavailable, "policy unavailable: try again later")
			return
		}
		if !ok {
			h.deny(r, s.p, "console: "+action+" not allowed")
			h.fail(w, r, s, http.StatusForbidden, fmt.Sprintf("policy does not allow %s to %s", s.p, action))
			return
		}
		next(w, r, s)
	})
}

// allowed asks data.limen.admin.allow whether p may take action.
func (h *Handler) allowed(r *http.Request, p identity.Principal, action string) (bool, error) {
	ok, err := h.cfg.Admin.AdminAllow(r.Context(), p, action)
	if err != nil {
		h.cfg.Logger.Error("console: admin policy evaluation failed", "action", action, "principal", p.String(), "err", err)
	}
	return ok && err == nil, err
}

// may is allowed, with an error counting as no: for what a page shows.
func (h *Handler) may(r *http.Request, p identity.Principal, action string) bool {
	ok, _ := h.allowed(r, p, action)
	return ok
}

// errSignedOut says there is no sign-in to admit.
var errSignedOut = errors.New("not signed in, or the sign-in expired")

func (h *Handler) check(r *http.Request) (*signin, error) {
	c, err := r.Cookie(cookieSession)
	if err != nil || c.Value == "" {
		return nil, errSignedOut
	}
	s, ok, err := h.sessions.get(r.Context(), c.Value, h.cfg.Now())
	if err != nil {
		h.cfg.Logger.Error("console sign-in unreadable; treated as signed out", "err", err)
		return nil, errSignedOut
	}
	if !ok {
		return nil, errSignedOut
	}
	return s, nil
}

// lockedOrGone refuses a user who was locked since signing in, or, for a
// local user, removed.
func (h *Handler) lockedOrGone(r *http.Request, s *signin) error {
	p := s.p
	if err := h.cfg.Locks.Check(p, h.cfg.Now()); err != nil {
		return err
	}
	if !s.local {
		return nil
	}
	if _, err := h.cfg.Users.Get(r.Context(), p.Name); err != nil {
		if errors.Is(err, users.ErrNotFound) {
			return fmt.Errorf("user %s no longer exists", p.Name)
		}
		h.cfg.Logger.Error("console: user store failed", "err", err)
		return errors.New("user store unavailable: try again later")
	}
	return nil
}

// checkCSRF wants the sign-in's token in the form or the header, and, when
// the browser says where the request comes from, this origin.
func checkCSRF(r *http.Request, want string) error {
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		if u, err := url.Parse(o); err != nil || u.Host != r.Host {
			return fmt.Errorf("request from origin %q refused", o)
		}
	}
	got := r.Header.Get(csrfHeader)
	if got == "" {
		got = r.PostFormValue(csrfField)
	}
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return errors.New("missing or wrong CSRF token: reload the page and try again")
	}
	return nil
}

func (h *Handler) setCookie(w http.ResponseWriter, name, value string, maxAge time.Duration) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: cookiePath, MaxAge: int(maxAge / time.Second),
		HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
}

func (h *Handler) dropCookie(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(cookieSession); err == nil {
		if err := h.sessions.remove(r.Context(), c.Value); err != nil {
			h.cfg.Logger.Error("console sign-out not stored", "err", err)
		}
	}
	http.SetCookie(w, &http.Cookie{Name: cookieSession, Value: "", Path: cookiePath, MaxAge: -1,
		HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
}

type signinData struct {
	Pre, Why, User string
	// OIDC offers sign-in through the identity provider.
	OIDC bool
}

// whySignedOut is the sign-in page's reason code for a browser sent back
// to it (?why=signed-out).
const whySignedOut = "signed-out"

// signinReasons are what the sign-in page may say for a ?why= code. The
// query string is anyone's to write (a link in a phishing mail), so the
// page shows only these words, never the query's.
var signinReasons = map[string]string{
	whySignedOut: "You are not signed in, or your sign-in expired or was ended: sign in again.",
}

func (h *Handler) signinPage(w http.ResponseWriter, r *http.Request) {
	h.signinForm(w, r, http.StatusOK, signinReasons[r.URL.Query().Get("why")], "")
}

// signinForm renders the sign-in page with a fresh pre-sign-in token,
// saying why (Limen's own words) and keeping the user name typed.
func (h *Handler) signinForm(w http.ResponseWriter, r *http.Request, status int, why, user string) {
	pre := randomToken()
	h.setCookie(w, cookiePre, pre, 10*time.Minute)
	h.render(w, r, status, "signin", nil, signinData{Pre: pre, Why: why, User: user, OIDC: h.cfg.OIDC != nil})
}

// signin checks the password exactly as limen login does (the same store,
// so the same rate limits per name and per address) and starts a sign-in
// bound to client console.
func (h *Handler) signin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	name, password := r.PostFormValue("user"), r.PostFormValue("password")
	c, err := r.Cookie(cookiePre)
	if err != nil || c.Value == "" || subtle.ConstantTimeCompare([]byte(c.Value), []byte(r.PostFormValue(csrfField))) != 1 {
		h.deny(r, identity.Principal{}, "console sign-in: missing or wrong CSRF token")
		h.fail(w, r, nil, http.StatusForbidden, "missing or wrong CSRF token: reload the sign-in page and try again")
		return
	}
	again := func(status int, why string) { h.signinForm(w, r, status, why, name) }
	u, err := h.cfg.Users.Authenticate(r.Context(), name, password, h.cfg.ClientAddr(r))
	switch {
	case errors.Is(err, users.ErrRateLimited):
		h.denyLogin(r, name, "console sign-in: rate limited")
		w.Header().Set("Retry-After", strconv.Itoa(60))
		again(http.StatusTooManyRequests, "Too many attempts: wait a minute and try again.")
		return
	case errors.Is(err, users.ErrBadCredentials):
		h.denyLogin(r, name, "console sign-in: bad credentials")
		again(http.StatusUnauthorized, "Wrong user name or password.")
		return
	case err != nil:
		h.cfg.Logger.Error("console sign-in: user store failed", "err", err)
		again(http.StatusServiceUnavailable, "The user store is unavailable: try again later.")
		return
	}
	p := identity.Principal{Kind: identity.KindUser, Name: u.Name, Traits: u.Traits, ClientID: ClientID, LoginID: randomToken()[:24]}
	if err := h.SignIn(w, r, p, "password"); err != nil {
		if errors.Is(err, ErrLocked) {
			again(http.StatusForbidden, err.Error())
			return
		}
		again(http.StatusServiceUnavailable, "The audit trail or the sign-in store is unavailable, so no one can sign in: try again later.")
		return
	}
	http.Redirect(w, r, Prefix+"sessions", http.StatusSeeOther)
}

// ErrLocked is SignIn's refusal of a locked person; the error says by
// whom and why.
var ErrLocked = errors.New("you are locked")

// SignIn starts a console sign-in for p, whom the caller authenticated by
// method ("password" or "oidc"): a locked p is refused (ErrLocked, audited
// as auth.denied) before anything else, so that no auth.login is stored
// for them; otherwise the sign-in is audited as auth.login, bound to
// client console whatever p says, and its cookie is set on w. The caller
// then redirects. Any other error means the audit trail did not record
// it or the sign-in could not be stored, and no one is signed in.
func (h *Handler) SignIn(w http.ResponseWriter, r *http.Request, p identity.Principal, method string) error {
	p.ClientID = ClientID
	if p.LoginID == "" {
		p.LoginID = randomToken()[:24]
	}
	now := h.cfg.Now()
	if err := h.cfg.Locks.Check(p, now); err != nil {
		h.deny(r, p, "console sign-in: locked: "+err.Error())
		return fmt.Errorf("%w: %w", ErrLocked, err)
	}
	expires := now.Add(h.cfg.SessionTTL)
	if err := h.emit(r, audit.Event{Type: audit.TypeAuthLogin, Principal: p, Fields: map[string]string{
		"login_id": p.LoginID, "client": ClientID, "method": method, "expires": expires.UTC().Format(time.RFC3339)}}); err != nil {
		return err
	}
	token, _, err := h.sessions.add(r.Context(), p, now, expires, method == "password")
	if err != nil {
		return err
	}
	h.setCookie(w, cookieSession, token, h.cfg.SessionTTL)
	h.setCookie(w, cookiePre, "", -time.Second)
	return nil
}

func (h *Handler) signout(w http.ResponseWriter, r *http.Request, s *signin) {
	h.dropCookie(w, r)
	http.Redirect(w, r, Prefix+"signin", http.StatusSeeOther)
}

// emit records e with the time and the caller's address.
func (h *Handler) emit(r *http.Request, e audit.Event) error {
	if e.Time.IsZero() {
		e.Time = h.cfg.Now()
	}
	e.ClientAddr = h.cfg.ClientAddr(r)
	if err := h.cfg.Audit.Emit(r.Context(), e); err != nil {
		h.cfg.Logger.Error("console: audit event not recorded", "type", e.Type, "err", err)
		return err
	}
	return nil
}

// deny records a refusal of r as auth.denied at the proxy, action admin
// (the console's calls are admin calls, like /v1/admin/).
func (h *Handler) deny(r *http.Request, p identity.Principal, reason string) {
	_ = h.emit(r, audit.Event{Type: audit.TypeAuthDenied, Principal: p,
		Denied: &audit.Denied{Hop: audit.HopProxy, Action: audit.ActionAdmin, Reason: reason, Path: audit.RequestPath(r.URL.Path)}})
}

func (h *Handler) denyLogin(r *http.Request, name, reason string) {
	if identity.ValidName(name) != nil {
		name = "(invalid name)"
	}
	_ = h.emit(r, audit.Event{Type: audit.TypeAuthDenied, Fields: map[string]string{"user": name, "client": ClientID},
		Denied: &audit.Denied{Hop: audit.HopProxy, Action: audit.ActionLogin, Reason: reason, Path: audit.RequestPath(r.URL.Path)}})
}
