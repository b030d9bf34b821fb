package console

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/limenhq/limen/gateway/adminapi"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/locks"
)

// The Locks and Policy pages: the admin's controls and the policy each hop
// runs.

func (h *Handler) locksPage(w http.ResponseWriter, r *http.Request, s *signin) {
	h.render(w, r, http.StatusOK, "locks", s, struct {
		Locks        []locks.Lock
		Lock, Unlock bool
		Done         string
		Kinds        []identity.Kind
		DefaultKind  identity.Kind
	}{h.cfg.Locks.List(h.cfg.Now()), h.may(r, s.p, ActionLock), h.may(r, s.p, ActionUnlock), r.URL.Query().Get("done"),
		[]identity.Kind{identity.KindUser, identity.KindBot}, identity.KindUser})
}

// lock is the admin API's lock, by the signed-in admin, from the form.
func (h *Handler) lock(w http.ResponseWriter, r *http.Request, s *signin) {
	req := adminapi.LockRequest{Target: locks.Target{Kind: identity.Kind(r.PostFormValue("kind")), Name: strings.TrimSpace(r.PostFormValue("name"))},
		Reason: r.PostFormValue("reason"), TTL: strings.TrimSpace(r.PostFormValue("ttl"))}
	l, status, err := h.cfg.Control.Lock(r, s.p, req)
	if err != nil {
		h.fail(w, r, s, status, err.Error())
		return
	}
	http.Redirect(w, r, Prefix+"locks?"+url.Values{"done": {"Locked " + l.Target.String() + "."}}.Encode(), http.StatusSeeOther)
}

func (h *Handler) unlock(w http.ResponseWriter, r *http.Request, s *signin) {
	t := locks.Target{Kind: identity.Kind(r.PathValue("kind")), Name: r.PathValue("name")}
	if _, status, err := h.cfg.Control.Unlock(r, s.p, t); err != nil {
		h.fail(w, r, s, status, err.Error())
		return
	}
	http.Redirect(w, r, Prefix+"locks?"+url.Values{"done": {"Unlocked " + t.String() + "."}}.Encode(), http.StatusSeeOther)
}

// policyRow is one hop on the Policy page.
type policyRow struct {
	PolicyHop
	Age         time.Duration
	LastRefusal string
	RefusalAt   time.Time
}

func (h *Handler) policyPage(w http.ResponseWriter, r *http.Request, s *signin) {
	var rows []policyRow
	if h.cfg.PolicyStatus != nil {
		now := h.cfg.Now()
		for _, hop := range h.cfg.PolicyStatus(r.Context()) {
			row := policyRow{PolicyHop: hop}
			if !hop.Status.ActivatedAt.IsZero() {
				row.Age = now.Sub(hop.Status.ActivatedAt).Round(time.Second)
			}
			if len(hop.Status.Refusals) > 0 {
				ref := hop.Status.Refusals[0]
				row.LastRefusal, row.RefusalAt = ref.Reason+": "+ref.Error, ref.At
			}
			rows = append(rows, row)
		}
	}
	h.render(w, r, http.StatusOK, "policy", s, struct {
		Rows  []policyRow
		Wired bool
	}{rows, h.cfg.PolicyStatus != nil})
}
