package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/limenhq/limen/gateway/bytesize"
)

// pageNames are the templates/ files that are pages; each is parsed with
// layout.html into a set of its own.
var pageNames = []string{"signin", "error", "sessions", "live", "recordings", "recording", "audit", "locks", "policy", "access", "requests"}

type pages struct{ t map[string]*template.Template }

var funcs = template.FuncMap{
	"time": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"dur": func(d time.Duration) string {
		if d <= 0 {
			return ""
		}
		return d.Round(time.Millisecond).String()
	},
	"bytes": func(n int64) string { return bytesize.Format(n) },
	"join":  strings.Join,
}

func parsePages() (*pages, error) {
	p := &pages{t: map[string]*template.Template{}}
	for _, n := range pageNames {
		t, err := template.New(n).Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/"+n+".html")
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", n, err)
		}
		p.t[n] = t
	}
	return p, nil
}

// navItem is one entry of the page menu.
type navItem struct {
	Path, Label string
	Current     bool
}

// view is what layout.html renders around a page.
type view struct {
	Title string
	// User is the signed-in principal's name; empty on the sign-in page.
	User string
	CSRF string
	Nav  []navItem
	Page any
}

var menu = []struct{ path, label, action string }{
	{"sessions", "Sessions", ActionSessions},
	{"recordings", "Recordings", ActionRecordings},
	{"audit", "Audit", ActionAudit},
	{"locks", "Locks", ActionLocks},
	{"policy", "Policy", ActionPolicy},
	{"access", "What may I do", ActionAccess},
	{"requests", "Requests", ActionRequests},
}

var titles = map[string]string{"signin": "Sign in", "error": "Error", "sessions": "Sessions", "live": "Live view",
	"recordings": "Recordings", "recording": "Recording", "audit": "Audit search", "locks": "Locks",
	"policy": "Policy status", "access": "What may I do", "requests": "Access requests"}

// render writes page name with data; s is the sign-in (nil before it), for
// the menu (only the pages policy lets them open) and the CSRF token.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, name string, s *signin, data any) {
	v := view{Title: titles[name], Page: data}
	if s != nil {
		v.User, v.CSRF = s.p.QualifiedName(), s.csrf
		for _, m := range menu {
			if m.action == ActionRequests && h.cfg.Requests == nil {
				continue
			}
			if h.may(r, s.p, m.action) {
				v.Nav = append(v.Nav, navItem{Path: Prefix + m.path, Label: m.label,
					Current: strings.HasPrefix(r.URL.Path, Prefix+m.path)})
			}
		}
	}
	var b bytes.Buffer
	if err := h.pages.t[name].ExecuteTemplate(&b, "layout", v); err != nil {
		h.cfg.Logger.Error("console: render", "page", name, "err", err)
		http.Error(w, "the console could not render this page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// isAPI tells the requests answered with JSON (the data behind the pages,
// and the live view's socket) from pages.
func isAPI(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, Prefix+"api/") || strings.HasSuffix(r.URL.Path, ".ws")
}

// fail answers an error: JSON for the API and for a state change made
// without a sign-in (a script's), an error page for what a person sees.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, s *signin, status int, msg string) {
	if isAPI(r) || (r.Method != http.MethodGet && s == nil) {
		writeJSON(w, status, map[string]string{"error": msg})
		return
	}
	h.render(w, r, status, "error", s, struct{ Status, Message string }{http.StatusText(status), msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
