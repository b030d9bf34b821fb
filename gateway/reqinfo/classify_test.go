package reqinfo

import (
	"net/http"
	"net/http/httptest"
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
		// One trailing slash reads as the path without it, as in the API
		// server (kpath lets exactly one through).
		{"GET", "/version/", Info{Verb: "get"}},
		{"GET", "/api/v1/namespaces/default/pods/", Info{true, "list", "", "v1", "pods", "", "default", ""}},
		{"GET", "/api/v1/namespaces/default/pods/web/", Info{true, "get", "", "v1", "pods", "", "default", "web"}},
		{"DELETE", "/api/v1/namespaces/a/pods/", Info{true, "deletecollection", "", "v1", "pods", "", "a", ""}},
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
