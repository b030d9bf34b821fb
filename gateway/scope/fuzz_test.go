package scope

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/limenhq/limen/gateway/kpath"
	"github.com/limenhq/limen/gateway/reqinfo"
)

// FuzzAllows: for any canonical request, an empty scope refuses; the
// coffee-menu scope allows only requests in its own groups or listed URLs,
// never a verb it does not list, never a subresource it does not list and
// never a version other than v1; and the answer does not depend on
// anything but the classified request (asked twice, answered the same).
func FuzzAllows(f *testing.F) {
	for _, s := range []string{
		"GET /apis/menus.example.com/v1/namespaces/team-a/coffeemenus",
		"GET /apis/menus.example.com/v1/namespaces/team-a/coffeemenus?watch=true",
		"DELETE /apis/menus.example.com/v1/namespaces/team-a/coffeemenus",
		"GET /api/v1/namespaces/team-a/pods/web/log",
		"POST /api/v1/namespaces/team-a/pods/web/exec",
		"GET /version", "GET /openapi/v2", "GET /apis", "GET /api/v1/namespaces",
	} {
		f.Add(s)
	}
	set := mustSet(f, coffee)
	sc, _ := set.Client("coffee-menu")
	empty, _ := set.Client("empty")
	f.Fuzz(func(t *testing.T, line string) {
		method, target, ok := strings.Cut(line, " ")
		if !ok || method == "" || strings.ContainsAny(method, " \t\r\n") {
			return
		}
		raw, query, _ := strings.Cut(target, "?")
		p, err := kpath.Parse(raw)
		if err != nil {
			return
		}
		r := &http.Request{Method: method, URL: &url.URL{RawQuery: query}, Header: http.Header{}}
		info, err := reqinfo.Classify(r, p)
		if err != nil {
			return
		}
		path := p.String()
		if empty.Allows(&info, path) {
			t.Fatalf("the empty scope allowed %s %s (%+v)", method, target, info)
		}
		got := sc.Allows(&info, path)
		if got != sc.Allows(&info, path) {
			t.Fatal("two answers for one request")
		}
		if !got {
			return
		}
		if !info.IsResourceRequest {
			if info.Verb != "get" || (path != "/version" && !strings.HasPrefix(path, "/openapi/")) {
				t.Fatalf("allowed unlisted non-resource %s %s", method, path)
			}
			return
		}
		switch {
		case info.APIGroup != "menus.example.com" && info.APIGroup != "":
			t.Fatalf("allowed group %q", info.APIGroup)
		case info.APIVersion != "v1":
			t.Fatalf("allowed version %q", info.APIVersion)
		case info.Subresource != "" && info.Subresource != "log":
			t.Fatalf("allowed subresource %q", info.Subresource)
		case !strings.Contains(" get list create watch ", " "+info.Verb+" "):
			t.Fatalf("allowed verb %q", info.Verb)
		case info.Verb == "watch" && info.Resource != "roasts":
			t.Fatalf("allowed a watch on %q, where only roasts list watch", info.Resource)
		}
	})
}

// FuzzParse: the parser never panics, and whatever it accepts matches
// without panicking.
func FuzzParse(f *testing.F) {
	f.Add(coffee)
	f.Add(`{"a": {"scope": [{"group": "", "version": "v1", "resource": "pods", "verbs": ["*"], "namespaces": ["*"]}]}}`)
	f.Add(`{"a": {"nonResourceURLs": ["/*"]}}`)
	f.Add(`{"a": {"unscoped": false}}`)
	info := &reqinfo.Info{IsResourceRequest: true, Verb: "get", APIVersion: "v1", Resource: "pods", Namespace: "a"}
	f.Fuzz(func(t *testing.T, doc string) {
		s, err := ParseJSON([]byte(doc))
		if err != nil {
			return
		}
		for _, n := range s.Names() {
			sc, _ := s.Client(n)
			sc.Allows(info, "/api/v1/namespaces/a/pods")
			sc.Allows(&reqinfo.Info{Verb: "get"}, "/version")
		}
	})
}
