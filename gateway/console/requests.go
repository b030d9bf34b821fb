package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/requests"
)

// RequestService is what the Requests page needs of the access requests
// (*requests.Service).
type RequestService interface {
	List(ctx context.Context, viewer identity.Principal, f requests.Filter) ([]requests.Request, error)
	Approve(ctx context.Context, approver identity.Principal, id, reason string) (requests.Request, error)
	Deny(ctx context.Context, approver identity.Principal, id, reason string) (requests.Request, error)
}

// requestRow is one request on the Requests page.
type requestRow struct {
	requests.Request
	// Mine says the signed-in user made it; Decide that it waits for a
	// decision the user may take (policy listed it for them).
	Mine, Decide bool
}

// requestsPage lists the signed-in user's requests and those policy lets
// them decide, with Approve and Deny for the pending ones.
func (h *Handler) requestsPage(w http.ResponseWriter, r *http.Request, s *signin) {
	list, err := h.cfg.Requests.List(r.Context(), s.p, requests.Filter{})
	if err != nil {
		h.fail(w, r, s, http.StatusServiceUnavailable, err.Error())
		return
	}
	rows := make([]requestRow, 0, len(list))
	for _, q := range list {
		mine := q.Requester.Same(s.p)
		rows = append(rows, requestRow{Request: q, Mine: mine, Decide: !mine && q.State == requests.StatePending})
	}
	h.render(w, r, http.StatusOK, "requests", s, struct {
		Rows []requestRow
		Done string
	}{rows, r.URL.Query().Get("done")})
}

// decideRequest approves or denies a request as the signed-in user, who
// is the console's client: requests.Service refuses the requester and
// whoever policy does not name, and audits each.
func (h *Handler) decideRequest(w http.ResponseWriter, r *http.Request, s *signin) {
	id, verb := r.PathValue("id"), r.PathValue("verb")
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	var q requests.Request
	var err error
	switch verb {
	case "approve":
		q, err = h.cfg.Requests.Approve(r.Context(), s.p, id, reason)
	case "deny":
		q, err = h.cfg.Requests.Deny(r.Context(), s.p, id, reason)
	default:
		h.fail(w, r, s, http.StatusNotFound, "no such action: approve or deny")
		return
	}
	if err != nil {
		h.fail(w, r, s, requestStatus(err), err.Error())
		return
	}
	done := q.ID + " " + string(q.State) + "."
	if q.State == requests.StateApproved {
		done = q.ID + " approved: " + q.Requester.String() + " holds " + q.Role + " on " + q.Cluster + " until " + q.Expires.UTC().Format("2006-01-02 15:04:05Z") + "."
	}
	http.Redirect(w, r, Prefix+"requests?"+url.Values{"done": {done}}.Encode(), http.StatusSeeOther)
}

func requestStatus(err error) int {
	switch {
	case errors.Is(err, requests.ErrRefused):
		return http.StatusForbidden
	case errors.Is(err, requests.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, requests.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, requests.ErrInvalid):
		return http.StatusBadRequest
	}
	return http.StatusServiceUnavailable
}
