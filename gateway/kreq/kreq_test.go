package kreq

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/limenhq/limen/gateway/kpath"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		method, target string
		want           Info
	}{
		{"GET", "/api/v1/namespaces/default/pods/web", Info{true, "get", "", "v1", "pods", "", "default", "web"}},
		{"GET", "/api/v1/namespaces/default/pods", Info{true, "list", "", "v1", "pods", "", "default", ""}},
		{"GET", "/api/v1/namespaces/default/pods?watch=true", Info{true, "watch", "", "v1", "pods", "", "default", ""}},
		{"GET", "/api/v1/namespaces/default/pods?watch=1&resourceVersion=5", Info{true, "watch", "", "v1", "pods", "", "default", ""}},
		{"GET", "/api/v1/pods", Info{true, "list", "", "v1", "pods", "", "", ""}},
		{"GET", "/api/v1/namespaces/a/pods?fieldSelector=metadata.name%3Dweb", Info{true, "list", "", "v1", "pods", "", "a", "web"}},
		{"GET", "/api/v1/watch/namespaces/a/pods", Info{true, "watch", "", "v1", "pods", "", "a", ""}},
		{"POST", "/apis/apps/v1/namespaces/a/deployments", Info{true, "create", "apps", "v1", "deployments", "", "a", ""}},
		{"PUT", "/apis/apps/v1/namespaces/a/deployments/d/scale", Info{true, "update", "apps", "v1", "deployments", "scale", "a", "d"}},
		{"PATCH", "/apis/apps/v1/namespaces/a/deployments/d", Info{true, "patch", "apps", "v1", "deployments", "", "a", "d"}},
		{"DELETE", "/api/v1/namespaces/a/pods/p", Info{true, "delete", "", "v1", "pods", "", "a", "p"}},
		{"DELETE", "/api/v1/namespaces/a/pods", Info{true, "deletecollection", "", "v1", "pods", "", "a", ""}},
		{"POST", "/api/v1/namespaces/a/pods/p/exec?command=sh&stdin=true", Info{true, "create", "", "v1", "pods", "exec", "a", "p"}},
		{"GET", "/api/v1/namespaces/a/pods/p/log?follow=true", Info{true, "get", "", "v1", "pods", "log", "a", "p"}},
		{"GET", "/api/v1/namespaces/a", Info{true, "get", "", "v1", "namespaces", "", "a", "a"}},
		{"PUT", "/api/v1/namespaces/a/finalize", Info{true, "update", "", "v1", "namespaces", "finalize", "a", "a"}},
		{"GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/system%3Aview", Info{true, "get", "rbac.authorization.k8s.io", "v1", "clusterroles", "", "", "system:view"}},
		{"GET", "/api", Info{Verb: "get"}},
		{"GET", "/apis/apps/v1", Info{Verb: "get"}},
		{"GET", "/version", Info{Verb: "get"}},
		{"GET", "/", Info{Verb: "get"}},
		{"POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", Info{true, "create", "authentication.k8s.io", "v1", "selfsubjectreviews", "", "", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.target, func(t *testing.T) {
			r := httptest.NewRequest(tt.method, "https://worker"+tt.target, nil)
			path, _, _ := strings.Cut(tt.target, "?")
			p, err := kpath.Parse(path)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Classify(r, p)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Classify = %+v\nwant       %+v", got, tt.want)
			}
		})
	}
}

func TestClassifyReadsThePathArgumentNotTheURL(t *testing.T) {
	r := httptest.NewRequest("GET", "https://worker/api/v1/namespaces/a/secrets/s", nil)
	p, _ := kpath.Parse("/api/v1/namespaces/a/configmaps/c")
	got, err := Classify(r, p)
	if err != nil || got.Resource != "configmaps" || got.Name != "c" {
		t.Fatalf("Classify = %+v, %v; want the configmap from the canonical path", got, err)
	}
	if r.URL.Path != "/api/v1/namespaces/a/secrets/s" {
		t.Fatalf("Classify modified the request URL: %q", r.URL.Path)
	}
}

func TestClassifyError(t *testing.T) {
	r := httptest.NewRequest("GET", "https://worker/api/v1/watch", nil)
	p, _ := kpath.Parse("/api/v1/watch")
	if _, err := Classify(r, p); err == nil {
		t.Fatal("a bare watch prefix classified without error")
	}
}

func TestStripIdentity(t *testing.T) {
	h := http.Header{
		"Authorization":                   {"Bearer stolen"},
		"authorization":                   {"Basic x"},
		"Impersonate-User":                {"admin"},
		"Impersonate-Group":               {"system:masters", "limen:edit"},
		"impersonate-group":               {"system:masters"},
		"IMPERSONATE-UID":                 {"0"},
		"Impersonate-Extra-Limen-Session": {"forged"},
		"Impersonate-Extra-Scopes":        {"x"},
		"X-Remote-User":                   {"admin"},
		"x-remote-group":                  {"system:masters"},
		"X-Remote-Extra-Foo":              {"bar"},
		"X-Limen-Grant":                   {"forged"},
		"x-LIMEN-anything":                {"forged"},
		"Accept":                          {"application/json"},
		"Content-Type":                    {"application/json"},
		"X-Request-Id":                    {"42"},
		"Impersonate":                     {"not a prefix match"},
		"X-Remote":                        {"not a prefix match"},
	}
	removed := StripIdentity(h)
	if len(removed) != 13 {
		t.Errorf("removed %d headers %q, want 13", len(removed), removed)
	}
	var left []string
	for k := range h {
		left = append(left, k)
	}
	slices.Sort(left)
	want := []string{"Accept", "Content-Type", "Impersonate", "X-Remote", "X-Request-Id"}
	if !slices.Equal(left, want) {
		t.Fatalf("left %q, want %q", left, want)
	}
}

func TestIsIdentityHeader(t *testing.T) {
	for name, want := range map[string]bool{
		"Authorization": true, "AUTHORIZATION": true, "Authorization2": false,
		"Proxy-Authorization": false, "Impersonate-": true, "impersonate-user": true,
		"X-Remote-": true, "X-Limen-": true, "X-Limenx": false, "": false, "Imp": false,
	} {
		if got := IsIdentityHeader(name); got != want {
			t.Errorf("IsIdentityHeader(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestImpersonate(t *testing.T) {
	h := http.Header{
		"Accept":            {"*/*"},
		"impersonate-user":  {"admin"},
		"Impersonate-Group": {"system:masters"},
		"Authorization":     {"Bearer x"},
	}
	if err := Impersonate(h, "alice", []string{"limen:edit", "limen:view"}, "0123"); err != nil {
		t.Fatal(err)
	}
	want := http.Header{
		"Accept":                          {"*/*"},
		"Impersonate-User":                {"alice"},
		"Impersonate-Group":               {"limen:edit", "limen:view"},
		"Impersonate-Extra-Limen-Session": {"0123"},
	}
	if len(h) != len(want) {
		t.Fatalf("headers %v, want %v", h, want)
	}
	for k, v := range want {
		if !slices.Equal(h[k], v) {
			t.Errorf("%s = %q, want %q", k, h[k], v)
		}
	}
	// The wire form: one header line per group.
	var sb strings.Builder
	_ = h.Write(&sb)
	if n := strings.Count(sb.String(), "Impersonate-Group: "); n != 2 {
		t.Errorf("%d Impersonate-Group lines on the wire, want 2:\n%s", n, sb.String())
	}
}

func TestImpersonateRefuses(t *testing.T) {
	tests := []struct {
		name, user, session string
		groups              []string
		sentinel            error
	}{
		{"no user", "", "s", []string{"g"}, nil},
		{"system user", "system:admin", "s", []string{"g"}, ErrSystemGroup},
		{"no groups", "alice", "s", nil, nil},
		{"system group", "alice", "s", []string{"limen:view", "system:masters"}, ErrSystemGroup},
		{"empty group", "alice", "s", []string{""}, nil},
		{"CRLF in group", "alice", "s", []string{"a\r\nImpersonate-Group: system:masters"}, nil},
		{"no session", "alice", "", []string{"g"}, nil},
		{"NUL in user", "al\x00ice", "s", []string{"g"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{"Impersonate-User": {"admin"}, "Accept": {"*/*"}}
			err := Impersonate(h, tt.user, tt.groups, tt.session)
			if err == nil {
				t.Fatal("accepted")
			}
			if tt.sentinel != nil && !errors.Is(err, tt.sentinel) {
				t.Errorf("error %v, want %v", err, tt.sentinel)
			}
			if len(h) != 1 || h.Get("Accept") == "" {
				t.Errorf("after a refusal headers are %v, want only Accept", h)
			}
		})
	}
}

func FuzzClassify(f *testing.F) {
	f.Add("GET", "/api/v1/namespaces/a/pods/p/log", "follow=true")
	f.Add("DELETE", "/apis/apps/v1/namespaces/a/deployments", "")
	f.Add("GET", "/api/v1/watch/pods", "watch=x&fieldSelector=metadata.name%3D..")
	f.Fuzz(func(t *testing.T, method, path, query string) {
		p, err := kpath.Parse(path)
		if err != nil || !validMethod(method) {
			return
		}
		r := httptest.NewRequest(http.MethodGet, "https://worker/", nil)
		r.Method = method
		r.URL.RawQuery = query
		info, err := Classify(r, p)
		if err != nil {
			return
		}
		for _, field := range []string{info.APIGroup, info.APIVersion, info.Resource, info.Subresource, info.Namespace} {
			if strings.Contains(field, "/") {
				t.Fatalf("%s %s?%s classified with a slash in a field: %+v", method, p, query, info)
			}
		}
		if info.IsResourceRequest && info.Resource == "" {
			t.Fatalf("resource request without a resource: %s %s: %+v", method, p, info)
		}
	})
}

func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for i := 0; i < len(m); i++ {
		if m[i] < 'A' || m[i] > 'Z' {
			return false
		}
	}
	return true
}
