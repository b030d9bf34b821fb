package adminapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/internal/apihttp"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/sessions"
)

// MinTTL is the shortest lock TTL accepted.
const MinTTL = time.Second

// ParseLockRequest reads a LockRequest body and makes the lock it asks for,
// created by by at now.
func ParseLockRequest(body []byte, by identity.Principal, now time.Time) (locks.Lock, error) {
	var req LockRequest
	if err := apihttp.DecodeJSON(bytes.NewReader(body), &req); err != nil {
		return locks.Lock{}, err
	}
	return req.lock(by, now)
}

// lock makes the lock req asks for, created by by at now.
func (req LockRequest) lock(by identity.Principal, now time.Time) (locks.Lock, error) {
	l := locks.Lock{Target: req.Target, Reason: strings.TrimSpace(req.Reason), CreatedBy: by.String(), CreatedAt: now}
	if req.TTL != "" {
		ttl, err := time.ParseDuration(req.TTL)
		if err != nil {
			return locks.Lock{}, fmt.Errorf("ttl %q: %w; use a duration such as 30m or 1h", req.TTL, err)
		}
		if ttl < MinTTL || ttl > 100*365*24*time.Hour {
			return locks.Lock{}, fmt.Errorf("ttl %s: must be at least %s; omit it for a lock until unlock", ttl, MinTTL)
		}
		l.Expires = now.Add(ttl)
	}
	if err := l.Validate(); err != nil {
		return locks.Lock{}, err
	}
	return l, nil
}

func (h *Handler) listLocks(w http.ResponseWriter, r *http.Request, _ identity.Principal) {
	list, err := h.cfg.LockStore.List(r.Context(), h.api.Now())
	if err != nil {
		h.api.Logger.Error("list locks", "err", err)
		apihttp.WriteError(w, http.StatusServiceUnavailable, "lock store unavailable: try again later")
		return
	}
	apihttp.WriteJSON(w, http.StatusOK, list)
}

// lock stores the lock and puts it in force before auditing: a lock must
// not wait on the audit trail. If the audit fails the caller is told the
// lock is in force but unaudited.
func (h *Handler) lock(w http.ResponseWriter, r *http.Request, p identity.Principal) {
	var req LockRequest
	if !apihttp.Decode(w, r, &req) {
		return
	}
	l, status, err := h.Lock(r, p, req)
	if err != nil {
		apihttp.WriteError(w, status, err.Error())
		return
	}
	apihttp.WriteJSON(w, http.StatusCreated, l)
}

// Lock sets the lock req asks for on behalf of p, whom the caller has
// authorized for ActionLock, as POST PathLocks does (the console uses it).
// On an error, status is the HTTP status that answers it.
func (h *Handler) Lock(r *http.Request, p identity.Principal, req LockRequest) (_ locks.Lock, status int, _ error) {
	l, err := req.lock(p, h.api.Now())
	if err != nil {
		return locks.Lock{}, http.StatusBadRequest, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	err = h.changer(r).set(r.Context(), l, p)
	switch {
	case errors.Is(err, errStore):
		h.api.Logger.Error("store lock", "target", l.Target.String(), "err", err)
		return locks.Lock{}, http.StatusServiceUnavailable, errors.New("lock store unavailable; the lock is NOT in force: try again")
	case err != nil:
		return locks.Lock{}, http.StatusServiceUnavailable, err
	}
	return l, http.StatusCreated, nil
}

// unlock removes the lock, and puts it back if the removal cannot be
// audited: no unaudited unlock.
func (h *Handler) unlock(w http.ResponseWriter, r *http.Request, p identity.Principal) {
	t := locks.Target{Kind: identity.Kind(r.PathValue("kind")), Name: r.PathValue("name")}
	l, status, err := h.Unlock(r, p, t)
	if err != nil {
		apihttp.WriteError(w, status, err.Error())
		return
	}
	apihttp.WriteJSON(w, http.StatusOK, l)
}

// Unlock removes the lock on t on behalf of p, whom the caller has
// authorized for ActionUnlock, as DELETE PathLocks/KIND/NAME does.
func (h *Handler) Unlock(r *http.Request, p identity.Principal, t locks.Target) (_ locks.Lock, status int, _ error) {
	if err := t.Validate(); err != nil {
		return locks.Lock{}, http.StatusBadRequest, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	l, err := h.changer(r).remove(r.Context(), t, p, h.api.Now())
	switch {
	case errors.Is(err, locks.ErrNotFound):
		return locks.Lock{}, http.StatusNotFound, fmt.Errorf("%s is not locked", t)
	case errors.Is(err, errStore):
		h.api.Logger.Error("remove lock", "target", t.String(), "err", err)
		return locks.Lock{}, http.StatusServiceUnavailable, errors.New("lock store unavailable; the lock stays in force: try again")
	case err != nil:
		h.api.Logger.Error("unlock not audited", "target", t.String(), "err", err)
		return locks.Lock{}, http.StatusServiceUnavailable, err
	}
	return l, http.StatusOK, nil
}

// changer makes lock changes for the caller of r: audited by them, put in
// force in Locks and pushed to the workers through OnChange.
func (h *Handler) changer(r *http.Request) changer {
	return changer{store: h.cfg.LockStore, applied: h.changedCtx,
		emit: func(e audit.Event) error { return h.api.Emit(r, e) }}
}

func (h *Handler) changedCtx(ctx context.Context, c locks.Change) {
	if h.cfg.OnChange != nil {
		h.cfg.OnChange(ctx, c)
	}
}

func lockEvent(typ audit.Type, by identity.Principal, l locks.Lock) audit.Event {
	f := map[string]string{"target": string(l.Target.Kind) + ":" + l.Target.Name, "reason": l.Reason}
	if !l.Expires.IsZero() {
		f["expires"] = l.Expires.UTC().Format(time.RFC3339)
	}
	return audit.Event{Type: typ, Principal: by, Fields: f}
}

func (h *Handler) listSessions(w http.ResponseWriter, r *http.Request, _ identity.Principal) {
	list := h.cfg.Sessions.List()
	if list == nil {
		list = []sessions.Info{}
	}
	apihttp.WriteJSON(w, http.StatusOK, list)
}

// kill ends the session on the proxy, tells the workers, then audits, like
// lock: the session must not outlive a broken audit trail.
func (h *Handler) kill(w http.ResponseWriter, r *http.Request, p identity.Principal) {
	info, status, err := h.Kill(r, p, r.PathValue("id"))
	if err != nil {
		apihttp.WriteError(w, status, err.Error())
		return
	}
	apihttp.WriteJSON(w, http.StatusOK, info)
}

// Kill kills session id on behalf of p, whom the caller has authorized for
// ActionSessionKill, as POST PathSessions/ID/kill does (the console uses it).
func (h *Handler) Kill(r *http.Request, p identity.Principal, id string) (_ sessions.Info, status int, _ error) {
	if err := sessions.ValidID(id); err != nil {
		return sessions.Info{}, http.StatusBadRequest, err
	}
	var info sessions.Info
	switch {
	case h.cfg.Sessions.Kill(id):
		info, _ = h.cfg.Sessions.Get(id)
		if h.cfg.OnKill != nil {
			h.cfg.OnKill(r.Context(), info, p)
		}
	case h.cfg.RemoteKill != nil:
		var err error
		if info, err = h.cfg.RemoteKill(r.Context(), id, p); errors.Is(err, sessions.ErrNoLiveSession) {
			return sessions.Info{}, http.StatusNotFound, fmt.Errorf("%w: list them with limen sessions ls", err)
		} else if err != nil {
			return sessions.Info{}, http.StatusServiceUnavailable, fmt.Errorf("session %s is not on this proxy, and the others could not be asked: %w", id, err)
		}
	default:
		return sessions.Info{}, http.StatusNotFound, fmt.Errorf("no live session %s: list them with limen sessions ls", id)
	}
	e := audit.Event{Type: audit.TypeSessionKill, Principal: p, Cluster: info.Cluster, SessionID: id,
		Fields: map[string]string{"user": info.Principal.String(), "kind": string(info.Kind), "target": info.Target}}
	if info.Proxy != "" {
		e.Fields["proxy"] = info.Proxy
	}
	if err := h.api.Emit(r, e); err != nil {
		return info, http.StatusServiceUnavailable, errors.New("the session is killed, but the audit trail did not record it: " + err.Error())
	}
	return info, http.StatusOK, nil
}
