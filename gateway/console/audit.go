package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/limenhq/limen/gateway/audit"
)

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

// search runs f for s and returns its page and how many events matched.
// The search itself is audited first (audit.search, with its filters, and
// download when it is not paged); when the trail cannot record it, nothing
// is searched.
func (h *Handler) search(r *http.Request, s *signin, f auditFilter, paged bool) ([]audit.Event, int, error) {
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
	fields := map[string]string{}
	for k, v := range f.query() {
		fields[k] = clipField(v[0])
	}
	if !paged {
		fields["download"] = "true"
	}
	if err := h.emit(r, audit.Event{Type: audit.TypeAuditSearch, Principal: s.p, Fields: fields}); err != nil {
		return nil, 0, fmt.Errorf("%w: the search could not be audited: %w", audit.ErrUnavailable, err)
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

// maxFieldLen bounds each filter as audit.search stores it: enough for any
// honest user, cluster or session name, and no room to fill the trail.
const maxFieldLen = 256

func clipField(v string) string {
	if len(v) <= maxFieldLen {
		return v
	}
	return strings.ToValidUTF8(v[:maxFieldLen], "") + "…"
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
	events, n, err := h.search(r, s, f, true)
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
			"session.kill", string(TypeSessionObserve), string(audit.TypeRecordingView), string(audit.TypeAuditSearch), "user.lock", "user.unlock", "user.add", "user.remove", "user.passwd",
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
	events, _, err := h.search(r, s, auditFilterOf(r), false)
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
