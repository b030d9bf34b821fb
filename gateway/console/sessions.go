package console

import (
	"cmp"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/sessions"
)

// owns reports whether p is the user (or bot) whose session or recording
// it is, whichever client they used: same kind, provenance and name, so
// the provider's bob never owns the local bob's.
func owns(p, owner identity.Principal) bool { return p.Same(owner) }

// recentSessions is how far back the Sessions page lists ended sessions
// from the audit trail, at most maxRecentSessions of them.
const (
	recentSessions    = 24 * time.Hour
	maxRecentSessions = 500
)

// sessionRow is one line of the Sessions page and its JSON.
type sessionRow struct {
	sessions.Info
	Client   string        `json:"client"`
	Live     bool          `json:"live"`
	Duration time.Duration `json:"duration_ns"`
	// Streamed marks the kinds with output to watch (exec, attach).
	Streamed bool `json:"-"`
}

// visibleSessions are the sessions s may see: their own, or all.
func (h *Handler) visibleSessions(r *http.Request, s *signin) []sessionRow {
	all := h.may(r, s.p, ActionSessionsAll)
	now := h.cfg.Now()
	var out []sessionRow
	for _, i := range h.cfg.Sessions.List() {
		if !all && !owns(s.p, i.Principal) {
			continue
		}
		row := sessionRow{Info: i, Client: i.Principal.ClientID, Live: i.Live(),
			Streamed: i.Kind == sessions.KindExec || i.Kind == sessions.KindAttach}
		if row.Client == "" {
			row.Client = "kubectl"
		}
		if row.Live {
			row.Duration = now.Sub(i.Start)
		} else {
			row.Duration = i.End.Sub(i.Start)
		}
		out = append(out, row)
	}
	// Sessions ended before this proxy's registry remembers (a restart,
	// more than it keeps) come from their session.end in the audit trail.
	seen := map[string]bool{}
	for _, row := range out {
		seen[row.ID] = true
	}
	q := audit.Query{Type: audit.TypeSessionEnd, Since: now.Add(-recentSessions), Limit: maxRecentSessions}
	if !all {
		q.User = s.p.String()
	}
	ends, err := h.cfg.Events.Search(r.Context(), q)
	if err != nil {
		h.cfg.Logger.Warn("console: recent sessions from the audit trail", "err", err)
	}
	for _, e := range ends {
		if e.Session == nil || seen[e.SessionID] || (!all && !owns(s.p, e.Principal)) {
			continue
		}
		seen[e.SessionID] = true
		k := sessions.Kind(e.Session.Login)
		row := sessionRow{Info: sessions.Info{ID: e.SessionID, Principal: e.Principal, Cluster: e.Cluster, Kind: k,
			Target: e.Session.Target, Start: e.Time.Add(-e.Session.Duration), End: e.Time, BytesIn: e.Session.BytesIn,
			BytesOut: e.Session.BytesOut, Reason: sessions.Reason(e.Session.EndReason)},
			Client: cmp.Or(e.Principal.ClientID, "kubectl"), Duration: e.Session.Duration,
			Streamed: k == sessions.KindExec || k == sessions.KindAttach}
		out = append(out, row)
	}
	// Live first, then the newest.
	slices.SortStableFunc(out, func(a, b sessionRow) int {
		if a.Live != b.Live {
			if a.Live {
				return -1
			}
			return 1
		}
		return b.Start.Compare(a.Start)
	})
	return out
}

func (h *Handler) sessionsPage(w http.ResponseWriter, r *http.Request, s *signin) {
	h.render(w, r, http.StatusOK, "sessions", s, struct {
		Rows             []sessionRow
		All, Kill, Watch bool
		Done             string
	}{h.visibleSessions(r, s), h.may(r, s.p, ActionSessionsAll), h.may(r, s.p, ActionKill), h.may(r, s.p, ActionObserve) && h.cfg.Observe != nil,
		r.URL.Query().Get("done")})
}

func (h *Handler) sessionsJSON(w http.ResponseWriter, r *http.Request, s *signin) {
	rows := h.visibleSessions(r, s)
	if rows == nil {
		rows = []sessionRow{}
	}
	writeJSON(w, http.StatusOK, rows)
}

// kill is the admin API's kill, by the signed-in admin.
func (h *Handler) kill(w http.ResponseWriter, r *http.Request, s *signin) {
	id := r.PathValue("id")
	if _, status, err := h.cfg.Control.Kill(r, s.p, id); err != nil {
		h.fail(w, r, s, status, err.Error())
		return
	}
	http.Redirect(w, r, Prefix+"sessions?"+url.Values{"done": {"Session " + id + " killed."}}.Encode(), http.StatusSeeOther)
}
