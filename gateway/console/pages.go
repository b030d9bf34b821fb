package console

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/limenhq/limen/gateway/adminapi"
	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/recstore"
	"github.com/limenhq/limen/gateway/sessions"
)

// owns reports whether p is the user (or bot) whose session or recording
// it is, whichever client they used.
func owns(p, owner identity.Principal) bool { return p.Kind == owner.Kind && p.Name == owner.Name }

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

// recordingRow is one recording as the console lists it: the store's
// facts joined with its session's start and end in the audit trail.
type recordingRow struct {
	ID        string             `json:"id"`
	Cluster   string             `json:"cluster"`
	Principal identity.Principal `json:"principal"`
	Client    string             `json:"client"`
	Kind      string             `json:"kind,omitempty"`
	Target    string             `json:"target,omitempty"`
	Command   string             `json:"command,omitempty"`
	Time      time.Time          `json:"time"`
	Size      int64              `json:"size"`
	SHA256    string             `json:"sha256"`
	// ExitCode is nil when the session.end carries none (killed, cut).
	ExitCode  *int          `json:"exit_code,omitempty"`
	Duration  time.Duration `json:"duration_ns,omitempty"`
	EndReason string        `json:"end_reason,omitempty"`
}

// ExitText is the exit status as the page shows it.
func (r recordingRow) ExitText() string {
	if r.ExitCode == nil {
		return "none"
	}
	return strconv.Itoa(*r.ExitCode)
}

// errNotYours hides whether someone else's recording exists.
var errNotYours = errors.New("no such recording")

// recording joins one stored recording with its audit events. A recording
// whose session.start cannot be found has no known owner and is shown only
// to those who may see all.
func (h *Handler) recording(r *http.Request, info recstore.Info) (recordingRow, error) {
	row := recordingRow{ID: info.ID, Cluster: info.Cluster, Time: info.Time, Size: info.Size, SHA256: info.SHA256}
	start, ok, err := h.cfg.Events.SessionStart(r.Context(), info.ID)
	if err != nil {
		return row, err
	}
	if ok {
		row.Principal, row.Client = start.Principal, start.Principal.ClientID
		if start.Session != nil {
			row.Kind, row.Target, row.Command = start.Session.Login, start.Session.Target, strings.Join(start.Session.Command, " ")
		}
	}
	if row.Client == "" {
		row.Client = "kubectl"
	}
	end, ok, err := h.cfg.Events.SessionEnd(r.Context(), info.ID)
	if err != nil {
		return row, err
	}
	if ok && end.Session != nil {
		row.ExitCode, row.Duration, row.EndReason = end.Session.ExitCode, end.Session.Duration, end.Session.EndReason
	}
	return row, nil
}

// recordingFilter is the Recordings page's form.
type recordingFilter struct{ User, Cluster, Target string }

func (h *Handler) visibleRecordings(r *http.Request, s *signin, f recordingFilter) ([]recordingRow, error) {
	list, err := h.cfg.Recordings.List()
	if err != nil {
		return nil, err
	}
	all := h.may(r, s.p, ActionRecordingsAll)
	out := []recordingRow{}
	for i := len(list) - 1; i >= 0; i-- { // newest first
		info := list[i]
		if f.Cluster != "" && info.Cluster != f.Cluster {
			continue
		}
		row, err := h.recording(r, info)
		if err != nil {
			return nil, err
		}
		if !all && (row.Principal.Name == "" || !owns(s.p, row.Principal)) {
			continue
		}
		if f.User != "" && row.Principal.Name != f.User && row.Principal.String() != f.User {
			continue
		}
		if f.Target != "" && !strings.Contains(row.Target+" "+row.Command, f.Target) {
			continue
		}
		out = append(out, row)
	}
	return out, nil
}

func (h *Handler) recordingsPage(w http.ResponseWriter, r *http.Request, s *signin) {
	q := r.URL.Query()
	f := recordingFilter{User: q.Get("user"), Cluster: q.Get("cluster"), Target: q.Get("target")}
	rows, err := h.visibleRecordings(r, s, f)
	if err != nil {
		h.cfg.Logger.Error("console: list recordings", "err", err)
		h.fail(w, r, s, http.StatusServiceUnavailable, "recordings unavailable: try again later")
		return
	}
	h.render(w, r, http.StatusOK, "recordings", s, struct {
		Rows   []recordingRow
		Filter recordingFilter
		All    bool
	}{rows, f, h.may(r, s.p, ActionRecordingsAll)})
}

func (h *Handler) recordingsJSON(w http.ResponseWriter, r *http.Request, s *signin) {
	q := r.URL.Query()
	rows, err := h.visibleRecordings(r, s, recordingFilter{User: q.Get("user"), Cluster: q.Get("cluster"), Target: q.Get("target")})
	if err != nil {
		h.cfg.Logger.Error("console: list recordings", "err", err)
		h.fail(w, r, s, http.StatusServiceUnavailable, "recordings unavailable: try again later")
		return
	}
	writeJSON(w, http.StatusOK, rows)
}

// openRecording opens recording id for s, or says it does not exist:
// someone else's recording, to one who may not see all, does not.
func (h *Handler) openRecording(r *http.Request, s *signin, id string) (io.ReadCloser, recordingRow, error) {
	rc, info, err := h.cfg.Recordings.Open(id)
	if err != nil {
		return nil, recordingRow{}, err
	}
	row, err := h.recording(r, info)
	if err != nil {
		rc.Close()
		return nil, row, err
	}
	if !h.may(r, s.p, ActionRecordingsAll) && (row.Principal.Name == "" || !owns(s.p, row.Principal)) {
		rc.Close()
		h.deny(r, s.p, "console: recording "+id+" of "+row.Principal.String()+" not allowed")
		return nil, recordingRow{}, errNotYours
	}
	return rc, row, nil
}

func (h *Handler) recordingError(w http.ResponseWriter, r *http.Request, s *signin, id string, err error) {
	if errors.Is(err, recstore.ErrNotFound) || errors.Is(err, errNotYours) {
		h.fail(w, r, s, http.StatusNotFound, fmt.Sprintf("no recording %s that you may see", id))
		return
	}
	h.cfg.Logger.Error("console: open recording", "id", id, "err", err)
	h.fail(w, r, s, http.StatusServiceUnavailable, "recording unavailable: try again later")
}

func (h *Handler) recordingPage(w http.ResponseWriter, r *http.Request, s *signin) {
	id := r.PathValue("id")
	rc, row, err := h.openRecording(r, s, id)
	if err != nil {
		h.recordingError(w, r, s, id, err)
		return
	}
	rc.Close()
	w.Header().Set("Content-Security-Policy", cspPlayer)
	h.render(w, r, http.StatusOK, "recording", s, struct {
		Row recordingRow
		Src string
	}{row, Prefix + "api/recordings/" + url.PathEscape(id)})
}

// recordingCast serves the recording itself, for the player and download.
// The store checks its SHA-256 as it is read; a mismatch cuts the answer
// short, so a changed recording never plays whole.
func (h *Handler) recordingCast(w http.ResponseWriter, r *http.Request, s *signin) {
	id := r.PathValue("id")
	rc, _, err := h.openRecording(r, s, id)
	if err != nil {
		h.recordingError(w, r, s, id, err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/x-asciicast")
	w.Header().Set("Cache-Control", "no-store")
	if r.URL.Query().Get("download") != "" {
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", id+".cast"))
	}
	if _, err := io.Copy(w, rc); err != nil {
		h.cfg.Logger.Error("console: recording cut short", "id", id, "err", err)
		panic(http.ErrAbortHandler) // the client sees a broken answer, not a whole one
	}
}

// auditFilter is the Audit page's form. The store filters by user,
// cluster, verb, type and start time; client, status, the end time and the
// pages are applied here, over at most auditScan of the newest matches.
type auditFilter struct {
	User, Client, Cluster, Verb, Type, Status, Since, Until, Session string
	Page                                                             int
}

const (
	auditPageSize = 50
	auditScan     = 5000
)

// timeLayouts are what the time-range fields accept: the browser's
// datetime-local value, and RFC 3339.
var timeLayouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339}

func parseTime(s string) (time.Time, error) {
	for _, l := range timeLayouts {
		if t, err := time.ParseInLocation(l, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("time %q: use YYYY-MM-DDTHH:MM (UTC) or RFC 3339", s)
}

func (f auditFilter) query() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"user": f.User, "client": f.Client, "cluster": f.Cluster, "verb": f.Verb,
		"type": f.Type, "status": f.Status, "since": f.Since, "until": f.Until, "session": f.Session} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

// search runs f and returns its page and how many events matched.
func (h *Handler) search(r *http.Request, f auditFilter, paged bool) ([]audit.Event, int, error) {
	q := audit.Query{User: f.User, Cluster: f.Cluster, Verb: f.Verb, Type: audit.Type(f.Type), Limit: auditScan}
	var until time.Time
	var err error
	if f.Since != "" {
		if q.Since, err = parseTime(f.Since); err != nil {
			return nil, 0, err
		}
	}
	if f.Until != "" {
		if until, err = parseTime(f.Until); err != nil {
			return nil, 0, err
		}
	}
	status := 0
	if f.Status != "" {
		if status, err = strconv.Atoi(f.Status); err != nil {
			return nil, 0, fmt.Errorf("status %q: want an HTTP status such as 403", f.Status)
		}
	}
	all, err := h.cfg.Events.Search(r.Context(), q)
	if err != nil {
		return nil, 0, err
	}
	var out []audit.Event
	for i := len(all) - 1; i >= 0; i-- { // newest first
		e := all[i]
		client := e.Principal.ClientID
		if client == "" && e.Principal.Name != "" {
			client = "kubectl"
		}
		switch {
		case f.Client != "" && client != f.Client,
			status != 0 && (e.Kube == nil || e.Kube.Status != status),
			!until.IsZero() && e.Time.After(until),
			f.Session != "" && e.SessionID != f.Session:
			continue
		}
		out = append(out, e)
	}
	n := len(out)
	if paged {
		from := min(f.Page*auditPageSize, n)
		out = out[from:min(from+auditPageSize, n)]
	}
	return out, n, nil
}

func auditFilterOf(r *http.Request) auditFilter {
	q := r.URL.Query()
	page, _ := strconv.Atoi(q.Get("page"))
	return auditFilter{User: q.Get("user"), Client: q.Get("client"), Cluster: q.Get("cluster"), Verb: q.Get("verb"),
		Type: q.Get("type"), Status: q.Get("status"), Since: q.Get("since"), Until: q.Get("until"),
		Session: q.Get("session"), Page: max(page, 0)}
}

// auditRow is one event as the Audit page shows it.
type auditRow struct {
	audit.Event
	Client, What, Status string
}

func describe(e audit.Event) (what, status string) {
	switch {
	case e.Kube != nil:
		what = strings.TrimSpace(e.Kube.Verb + " " + e.Kube.Resource + "/" + e.Kube.Subresource)
		what = strings.TrimSuffix(what, "/")
		if e.Kube.Namespace != "" || e.Kube.Name != "" {
			what += " " + e.Kube.Namespace + "/" + e.Kube.Name
		}
		if e.Kube.Status != 0 {
			status = strconv.Itoa(e.Kube.Status)
		}
	case e.Denied != nil:
		what, status = e.Denied.Action+": "+e.Denied.Reason, "denied"
	case e.Session != nil:
		what = e.Session.Login + " " + e.Session.Target
		if e.Session.EndReason != "" {
			status = e.Session.EndReason
		}
	default:
		var kv []string
		for k, v := range e.Fields {
			kv = append(kv, k+"="+v)
		}
		slices.Sort(kv)
		what = strings.Join(kv, " ")
	}
	return what, status
}

func (h *Handler) auditPage(w http.ResponseWriter, r *http.Request, s *signin) {
	f := auditFilterOf(r)
	events, n, err := h.search(r, f, true)
	msg := ""
	if err != nil {
		if !errors.Is(err, audit.ErrUnavailable) {
			msg = err.Error()
		} else {
			h.fail(w, r, s, http.StatusServiceUnavailable, "audit trail unavailable: try again later")
			return
		}
	}
	rows := make([]auditRow, 0, len(events))
	for _, e := range events {
		row := auditRow{Event: e, Client: e.Principal.ClientID}
		if row.Client == "" && e.Principal.Name != "" {
			row.Client = "kubectl"
		}
		row.What, row.Status = describe(e)
		rows = append(rows, row)
	}
	link := func(page int) string {
		v := f.query()
		if page > 0 {
			v.Set("page", strconv.Itoa(page))
		}
		return Prefix + "audit?" + v.Encode()
	}
	pages := (n + auditPageSize - 1) / auditPageSize
	data := struct {
		Filter                 auditFilter
		Rows                   []auditRow
		Total, Page, Pages     int
		Prev, Next, JSON, Warn string
		Types                  []string
	}{Filter: f, Rows: rows, Total: n, Page: f.Page + 1, Pages: max(pages, 1), JSON: Prefix + "api/audit?" + f.query().Encode(), Warn: msg,
		Types: []string{"kube.request", "kube.sent", "auth.denied", "auth.login", "session.start", "session.end",
			"session.kill", string(TypeSessionObserve), "user.lock", "user.unlock", "user.add", "user.remove", "user.passwd",
			"token.create", "token.use"}}
	if f.Page > 0 {
		data.Prev = link(f.Page - 1)
	}
	if f.Page+1 < pages {
		data.Next = link(f.Page + 1)
	}
	h.render(w, r, http.StatusOK, "audit", s, data)
}

// auditJSON is the download: every match (up to auditScan), newest first.
func (h *Handler) auditJSON(w http.ResponseWriter, r *http.Request, s *signin) {
	events, _, err := h.search(r, auditFilterOf(r), false)
	switch {
	case errors.Is(err, audit.ErrUnavailable):
		h.fail(w, r, s, http.StatusServiceUnavailable, "audit trail unavailable: try again later")
		return
	case err != nil:
		h.fail(w, r, s, http.StatusBadRequest, err.Error())
		return
	}
	if events == nil {
		events = []audit.Event{}
	}
	w.Header().Set("Content-Disposition", `attachment; filename="limen-audit.json"`)
	writeJSON(w, http.StatusOK, events)
}

func (h *Handler) locksPage(w http.ResponseWriter, r *http.Request, s *signin) {
	h.render(w, r, http.StatusOK, "locks", s, struct {
		Locks          []locks.Lock
		Lock, Unlock   bool
		Done           string
		Kinds          []identity.Kind
		DefaultKind    identity.Kind
		ReasonRequired bool
	}{h.cfg.Locks.List(h.cfg.Now()), h.may(r, s.p, ActionLock), h.may(r, s.p, ActionUnlock), r.URL.Query().Get("done"),
		[]identity.Kind{identity.KindUser, identity.KindBot}, identity.KindUser, true})
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
