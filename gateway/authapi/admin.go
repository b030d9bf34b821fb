package authapi

import (
	"errors"
	"net/http"
	"time"

	"github.com/limenhq/limen/gateway/auth"
	"github.com/limenhq/limen/gateway/enroll"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/users"
)

func (h *Handler) listUsers(w http.ResponseWriter, r *http.Request, _ identity.Principal) {
	list, err := h.cfg.Users.List(r.Context())
	if err != nil {
		h.storeFailed(w, err)
		return
	}
	if list == nil {
		list = []users.User{}
	}
	writeJSON(w, http.StatusOK, list)
}

func (h *Handler) addUser(w http.ResponseWriter, r *http.Request, p identity.Principal) {
	var req UserRequest
	if !decode(w, r, &req) {
		return
	}
	h.userChange(w, r, p, "user.add", req.Name, func() error {
		return h.cfg.Users.Add(r.Context(), req.Name, req.Password, req.Traits)
	})
}

func (h *Handler) removeUser(w http.ResponseWriter, r *http.Request, p identity.Principal) {
	name := r.PathValue("name")
	h.userChange(w, r, p, "user.remove", name, func() error { return h.cfg.Users.Remove(r.Context(), name) })
}

func (h *Handler) setPassword(w http.ResponseWriter, r *http.Request, p identity.Principal) {
	var req PasswordRequest
	if !decode(w, r, &req) {
		return
	}
	name := r.PathValue("name")
	h.userChange(w, r, p, "user.passwd", name, func() error {
		return h.cfg.Users.SetPassword(r.Context(), name, req.Password)
	})
}

// userChange runs change, maps its error, and audits the outcome.
func (h *Handler) userChange(w http.ResponseWriter, r *http.Request, p identity.Principal, event, name string, change func() error) {
	err := change()
	h.audit(r, auth.Event{Type: event, Actor: p.String(), Success: err == nil, Fields: map[string]string{"user": name}})
	switch {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, users.ErrNotFound):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, users.ErrExists):
		writeError(w, http.StatusConflict, err.Error())
	default:
		// Validation errors from the store name the bad field.
		writeError(w, http.StatusBadRequest, err.Error())
	}
}

func (h *Handler) createToken(w http.ResponseWriter, r *http.Request, p identity.Principal) {
	var req TokenRequest
	if !decode(w, r, &req) {
		return
	}
	var ttl time.Duration
	if req.TTL != "" {
		var err error
		if ttl, err = time.ParseDuration(req.TTL); err != nil {
			writeError(w, http.StatusBadRequest, "ttl: want a duration such as 1h")
			return
		}
	}
	if err := auth.ValidClusterName(req.Cluster); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	tok, info, err := h.cfg.Tokens.Create(r.Context(), req.Cluster, ttl, h.cfg.CA.Fingerprint(), p.String())
	if errors.Is(err, enroll.ErrAuditUnavailable) {
		h.storeFailed(w, err)
		return
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, TokenResponse{Token: tok.String(), Info: info})
}

func (h *Handler) listTokens(w http.ResponseWriter, r *http.Request, _ identity.Principal) {
	list, err := h.cfg.Tokens.List(r.Context())
	if err != nil {
		h.storeFailed(w, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

func (h *Handler) storeFailed(w http.ResponseWriter, err error) {
	h.cfg.Logger.Error("store failed", "err", err)
	writeError(w, http.StatusServiceUnavailable, "store unavailable: try again later")
}
