package authapi

import (
	"errors"
	"net/http"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/enroll"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/internal/apihttp"
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
	apihttp.WriteJSON(w, http.StatusOK, list)
}

func (h *Handler) addUser(w http.ResponseWriter, r *http.Request, p identity.Principal) {
	var req UserRequest
	if !apihttp.Decode(w, r, &req) {
		return
	}
	h.userChange(w, r, p, audit.TypeUserAdd, req.Name, func() error {
		return h.cfg.Users.Add(r.Context(), req.Name, req.Password, req.Traits)
	})
}

func (h *Handler) removeUser(w http.ResponseWriter, r *http.Request, p identity.Principal) {
	name := r.PathValue("name")
	h.userChange(w, r, p, audit.TypeUserRemove, name, func() error { return h.cfg.Users.Remove(r.Context(), name) })
}

func (h *Handler) setPassword(w http.ResponseWriter, r *http.Request, p identity.Principal) {
	var req PasswordRequest
	if !apihttp.Decode(w, r, &req) {
		return
	}
	name := r.PathValue("name")
	h.userChange(w, r, p, audit.TypeUserPasswd, name, func() error {
		return h.cfg.Users.SetPassword(r.Context(), name, req.Password)
	})
}

// userChange runs change, maps its error, and audits the outcome: a change
// that failed is recorded with its error. The change is not undone when the
// audit trail fails, but the caller is told it went unrecorded.
func (h *Handler) userChange(w http.ResponseWriter, r *http.Request, p identity.Principal, typ audit.Type, name string, change func() error) {
	err := change()
	fields := map[string]string{"user": name}
	if err != nil {
		fields["error"] = err.Error()
	}
	aerr := h.api.Emit(r, audit.Event{Type: typ, Principal: p, Fields: fields})
	switch {
	case err == nil && aerr != nil:
		apihttp.WriteError(w, http.StatusServiceUnavailable, "the change is made, but the audit trail did not record it: "+aerr.Error())
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, users.ErrNotFound):
		apihttp.WriteError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, users.ErrExists):
		apihttp.WriteError(w, http.StatusConflict, err.Error())
	default:
		// Validation errors from the store name the bad field.
		apihttp.WriteError(w, http.StatusBadRequest, err.Error())
	}
}

func (h *Handler) createToken(w http.ResponseWriter, r *http.Request, p identity.Principal) {
	var req TokenRequest
	if !apihttp.Decode(w, r, &req) {
		return
	}
	var ttl time.Duration
	if req.TTL != "" {
		var err error
		if ttl, err = time.ParseDuration(req.TTL); err != nil {
			apihttp.WriteError(w, http.StatusBadRequest, "ttl: want a duration such as 1h")
			return
		}
	}
	if err := ca.ValidClusterName(req.Cluster); err != nil {
		apihttp.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	tok, info, err := h.cfg.Tokens.Create(r.Context(), req.Cluster, ttl, h.cfg.CA.Fingerprint(), p)
	if errors.Is(err, enroll.ErrAuditUnavailable) {
		h.storeFailed(w, err)
		return
	}
	if err != nil {
		apihttp.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	apihttp.WriteJSON(w, http.StatusOK, TokenResponse{Token: tok.String(), Info: info})
}

func (h *Handler) listTokens(w http.ResponseWriter, r *http.Request, _ identity.Principal) {
	list, err := h.cfg.Tokens.List(r.Context())
	if err != nil {
		h.storeFailed(w, err)
		return
	}
	apihttp.WriteJSON(w, http.StatusOK, list)
}

func (h *Handler) storeFailed(w http.ResponseWriter, err error) {
	h.api.Logger.Error("store failed", "err", err)
	apihttp.WriteError(w, http.StatusServiceUnavailable, "store unavailable: try again later")
}
