package kpath

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func TestParseAccepts(t *testing.T) {
	tests := []struct{ in, decoded string }{
		{"/", "/"},
		{"/api", "/api"},
		{"/api/v1/namespaces/default/pods/web-0", "/api/v1/namespaces/default/pods/web-0"},
		{"/apis/apps/v1/namespaces/a/deployments/b/scale", "/apis/apps/v1/namespaces/a/deployments/b/scale"},
		{"/.well-known/openid-configuration", "/.well-known/openid-configuration"},
		{"/apis/rbac.authorization.k8s.io/v1/clusterroles/system:aggregate-to-view", "/apis/rbac.authorization.k8s.io/v1/clusterroles/system:aggregate-to-view"},
		{"/apis/rbac.authorization.k8s.io/v1/clusterroles/system%3Aview", "/apis/rbac.authorization.k8s.io/v1/clusterroles/system:view"},
		{"/a/b%20c", "/a/b c"},
		{"/a/x@y+z=1;2,3!$&'()*~_-", "/a/x@y+z=1;2,3!$&'()*~_-"},
		{"/a/.hidden", "/a/.hidden"},
		{"/a/f.o.o", "/a/f.o.o"},
		// One trailing slash, as generated clients ask for /version/.
		{"/version/", "/version/"},
		{"/api/v1/namespaces/default/pods/", "/api/v1/namespaces/default/pods/"},
	}
	for _, tt := range tests {
		p, err := Parse(tt.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		if p.String() != tt.in || p.Decoded() != tt.decoded {
			t.Errorf("Parse(%q) = %q / %q, want %q / %q", tt.in, p.String(), p.Decoded(), tt.in, tt.decoded)
		}
		u := &url.URL{Scheme: "https", Host: "api", RawQuery: "watch=1"}
		p.SetURL(u)
		if u.EscapedPath() != tt.in || u.RequestURI() != tt.in+"?watch=1" {
			t.Errorf("SetURL(%q): EscapedPath %q, RequestURI %q", tt.in, u.EscapedPath(), u.RequestURI())
		}
	}
}

func TestParseRefuses(t *testing.T) {
	tests := []struct{ name, in, why string }{
		{"empty", "", "empty"},
		{"relative", "api/v1", "does not start"},
		{"dotdot", "/api/v1/../../secrets", "dot segment"},
		{"dot", "/api/./v1", "dot segment"},
		{"trailing dotdot", "/api/..", "dot segment"},
		{"double slash", "/api//v1", "empty segment"},
		{"leading double slash", "//api", "empty segment"},
		{"two trailing slashes", "/api/v1//", "empty segment"},
		{"only slashes", "///", "empty segment"},
		{"trailing slash after dotdot", "/api/../", "dot segment"},
		{"trailing slash after a trailing dot", "/api/v1./", "ends with a dot"},
		{"trailing-dot segment", "/api/v1/namespaces/default./pods", "ends with a dot"},
		{"triple dot", "/api/...", "ends with a dot"},
		{"encoded slash", "/api/v1/namespaces%2Fkube-system", "slash"},
		{"encoded slash lower", "/api/v1/a%2fb", "slash"},
		{"encoded dot", "/api/%2E%2E/x", "dot"},
		{"encoded dot lower", "/api/%2e%2e/x", "dot"},
		{"encoded dot in name", "/api/v1/pods/a%2Eb", "dot"},
		{"encoded percent", "/api/%252F", "percent sign"},
		{"encoded percent lower", "/api/%25", "percent sign"},
		{"encoded backslash", "/api/a%5Cb", "backslash"},
		{"encoded backslash lower", "/api/a%5cb", "backslash"},
		{"backslash", `/api\v1`, "backslash"},
		{"backslash dotdot", `/api/..\..\secrets`, "backslash"},
		{"NUL", "/api/a\x00b", "control byte"},
		{"encoded NUL", "/api/a%00b", "control byte"},
		{"tab", "/api/a\tb", "control byte"},
		{"DEL", "/api/a\x7fb", "control byte"},
		{"CRLF", "/api\r\nX-Injected: 1", "control byte"},
		{"encoded CR", "/api/%0D", "control byte"},
		{"non-ASCII", "/api/pödś", "non-ASCII"},
		{"encoded non-ASCII", "/api/p%C3%B6d", "non-ASCII"},
		{"space", "/api/a b", "must be percent-encoded"},
		{"quote", `/api/"x"`, "must be percent-encoded"},
		{"brace", "/api/{x}", "must be percent-encoded"},
		{"hash", "/api/a#b", "must be percent-encoded"},
		{"question mark", "/api/a?b", "must be percent-encoded"},
		{"truncated escape", "/api/a%2", "invalid percent escape"},
		{"bare percent", "/api/%", "invalid percent escape"},
		{"bad hex", "/api/%zz", "invalid percent escape"},
		{"needless escape", "/api/%41", "must be written as is"},
		{"encoded tilde", "/api/%7E", "must be written as is"},
		{"lower-case hex", "/api/system%3aview", "upper-case"},
		{"too long", "/" + strings.Repeat("a", MaxLen), "longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse(tt.in)
			if err == nil {
				t.Fatalf("Parse(%q) accepted it as %q", tt.in, p)
			}
			if !errors.Is(err, ErrNotCanonical) || !strings.Contains(err.Error(), tt.why) {
				t.Fatalf("Parse(%q) error = %v, want ErrNotCanonical saying %q", tt.in, err, tt.why)
			}
		})
	}
}

func TestSplitProxyPath(t *testing.T) {
	tests := []struct {
		in, cluster, rest string
		ok                bool
	}{
		{"/k8s/prod/api/v1/pods", "prod", "/api/v1/pods", true},
		{"/k8s/prod", "prod", "/", true},
		{"/k8s/prod/", "prod", "/", true},
		{"/k8s/a-1/version", "a-1", "/version", true},
		{"/k8s/", "", "", false},
		{"/k8s//api", "", "", false},
		{"/k8s/Prod/api", "", "", false},
		{"/k8s/-x/api", "", "", false},
		{"/k8s/x-/api", "", "", false},
		{"/k8s/a.b/api", "", "", false},
		{"/k8s/..", "", "", false},
		{"/k8s/%70rod/api", "", "", false},
		{"/k8s/prod%2Fapi", "", "", false},
		{"/k8s/prod/api/../../other", "", "", false},
		{"/k8s/prod//api", "", "", false},
		{"/K8S/prod/api", "", "", false},
		{"/console/x", "", "", false},
		{"/k8s/" + strings.Repeat("a", 64) + "/api", "", "", false},
	}
	for _, tt := range tests {
		cluster, rest, err := SplitProxyPath(tt.in)
		if (err == nil) != tt.ok {
			t.Errorf("SplitProxyPath(%q) error = %v, want ok=%v", tt.in, err, tt.ok)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrNotCanonical) {
				t.Errorf("SplitProxyPath(%q) error %v does not wrap ErrNotCanonical", tt.in, err)
			}
			continue
		}
		if cluster != tt.cluster || rest.String() != tt.rest {
			t.Errorf("SplitProxyPath(%q) = %q, %q; want %q, %q", tt.in, cluster, rest, tt.cluster, tt.rest)
		}
	}
}

func TestFromRequestUsesTheWireSpelling(t *testing.T) {
	tests := []struct {
		target string
		ok     bool
		rest   string
	}{
		{"/k8s/prod/api/v1/pods?watch=1&fieldSelector=a%2Fb", true, "/api/v1/pods"},
		// net/http leaves RawPath empty for %41 and would re-encode: the
		// wire spelling must still be refused.
		{"/k8s/prod/api/%41", false, ""},
		{"/k8s/prod/api/a%2Fb", false, ""},
		{"/k8s/prod/api/%2e%2e/secrets", false, ""},
		{"/k8s/prod/api/a%5Cb", false, ""},
		{"/k8s/prod/api/pods.", false, ""},
		{"http://proxy/k8s/prod/api", false, ""},
		{"*", false, ""},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodGet, "https://proxy.example", nil)
		r.RequestURI = tt.target
		_, rest, err := FromRequest(r, "")
		if (err == nil) != tt.ok || err == nil && rest.String() != tt.rest {
			t.Errorf("FromRequest(%q) = %q, %v; want ok=%v rest %q", tt.target, rest, err, tt.ok, tt.rest)
		}
	}
	r, _ := http.NewRequest(http.MethodGet, "https://proxy.example/k8s/prod/api/v1?x=1", nil)
	if c, rest, err := FromRequest(r, ""); err != nil || c != "prod" || rest.String() != "/api/v1" {
		t.Errorf("client-side request: %q %q %v", c, rest, err)
	}
}

// TestFromRequestByServerName: with a cluster named by the TLS server name
// the whole target is the Kubernetes path, a /k8s/ prefix naming the same
// cluster is still split, and one naming another cluster is refused.
func TestFromRequestByServerName(t *testing.T) {
	tests := []struct {
		server, target string
		cluster, rest  string
		err            error // nil: ok
	}{
		{"prod", "/version", "prod", "/version", nil},
		{"prod", "/", "prod", "/", nil},
		{"prod", "/api/v1/namespaces/default/pods?watch=1", "prod", "/api/v1/namespaces/default/pods", nil},
		{"prod", "/k8s/prod/api/v1", "prod", "/api/v1", nil},
		{"prod", "/k8s/prod", "prod", "/", nil},
		{"prod", "/k8s/staging/api/v1", "", "", ErrClusterMismatch},
		{"prod", "/k8s/staging", "", "", ErrClusterMismatch},
		// The same canonical rules as under /k8s/.
		{"prod", "/api/%2e%2e/secrets", "", "", ErrNotCanonical},
		{"prod", "/api//v1", "", "", ErrNotCanonical},
		{"prod", "/k8s/Prod/api", "", "", ErrNotCanonical},
		{"a.b", "/version", "", "", ErrNotCanonical},
		{"-x", "/version", "", "", ErrNotCanonical},
		{"", "/version", "", "", ErrNotCanonical},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodGet, "https://proxy.example", nil)
		r.RequestURI = tt.target
		c, rest, err := FromRequest(r, tt.server)
		if tt.err != nil {
			if !errors.Is(err, tt.err) {
				t.Errorf("FromRequest(%q, server %q) = %q %q, %v; want %v", tt.target, tt.server, c, rest, err, tt.err)
			}
			continue
		}
		if err != nil || c != tt.cluster || rest.String() != tt.rest {
			t.Errorf("FromRequest(%q, server %q) = %q %q, %v; want %q %q", tt.target, tt.server, c, rest, err, tt.cluster, tt.rest)
		}
	}
}

func TestClusterFromServerName(t *testing.T) {
	names := []string{"localhost", "127.0.0.1", "limen.example.com"}
	tests := []struct {
		sn      string
		cluster string
		ok      bool
	}{
		{"prod.kube.limen.example.com", "prod", true},
		{"PROD.Kube.Limen.Example.COM.", "prod", true},
		{"demo.kube.127.0.0.1", "demo", true},
		{"demo.kube.localhost", "demo", true},
		{"a.b.kube.localhost", "a.b", true}, // named, and refused by FromRequest
		{"kube.localhost", "", false},
		{".kube.localhost", "", false},
		{"limen.example.com", "", false},
		{"localhost", "", false},
		{"", "", false},
		{"prod.kube.other.example.com", "", false},
		{"prod.kube.example.com", "", false},
	}
	for _, tt := range tests {
		c, ok := ClusterFromServerName(tt.sn, names)
		if c != tt.cluster || ok != tt.ok {
			t.Errorf("ClusterFromServerName(%q) = %q, %v; want %q, %v", tt.sn, c, ok, tt.cluster, tt.ok)
		}
	}
	if sn := ServerName("prod", "Limen.Example.com"); sn != "prod.kube.limen.example.com" {
		t.Errorf("ServerName = %q", sn)
	}
	if c, ok := ClusterFromServerName(ServerName("prod", "127.0.0.1"), names); c != "prod" || !ok {
		t.Errorf("ServerName does not round-trip: %q %v", c, ok)
	}
}

func TestSegments(t *testing.T) {
	p, _ := Parse("/api/v1/namespaces/a%20b")
	if got := strings.Join(p.Segments(), "|"); got != "api|v1|namespaces|a b" {
		t.Errorf("Segments = %q", got)
	}
	root, _ := Parse("/")
	v, _ := Parse("/version/")
	if got := strings.Join(v.Segments(), "|"); got != "version" {
		t.Errorf("Segments of /version/ = %q, want the trailing slash left out", got)
	}
	if len(root.Segments()) != 0 {
		t.Errorf("root Segments = %q", root.Segments())
	}
}

func TestValidCluster(t *testing.T) {
	for _, ok := range []string{"a", "prod-1", "0", strings.Repeat("a", 63)} {
		if err := ValidCluster(ok); err != nil {
			t.Errorf("ValidCluster(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "-a", "a-", "A", "a.b", "a_b", "a b", strings.Repeat("a", 64), "é"} {
		if err := ValidCluster(bad); err == nil {
			t.Errorf("ValidCluster(%q) = nil, want an error", bad)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"/", "/api/v1/pods", "/a/%3A", "/a/%2F", "/a/..", "/a//b", `/a\b`, "/a/%2e", "/a/b.", "/%C3%A9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		p, err := Parse(in)
		if err != nil {
			if !errors.Is(err, ErrNotCanonical) {
				t.Fatalf("error %v does not wrap ErrNotCanonical", err)
			}
			return
		}
		s := p.String()
		if s != in {
			t.Fatalf("accepted %q as a different string %q", in, s)
		}
		again, err := Parse(s)
		if err != nil || again != p {
			t.Fatalf("re-parse of %q: %v, %+v", s, err, again)
		}
		lower := strings.ToLower(s)
		for _, bad := range []string{"%2f", "%2e", "%25", "%5c", "%00", "\\", "//", "/./", "/../"} {
			if strings.Contains(lower, bad) {
				t.Fatalf("accepted %q containing %q", s, bad)
			}
		}
		if s != "/" && (strings.HasSuffix(s, "//") || strings.HasSuffix(strings.TrimSuffix(s, "/"), ".")) || strings.Contains(s, "./") {
			t.Fatalf("accepted %q with an empty or trailing-dot segment", s)
		}
		for i := 0; i < len(p.Decoded()); i++ {
			if c := p.Decoded()[i]; c < 0x20 || c >= 0x7f || c == '\\' || c == '%' {
				t.Fatalf("decoded %q holds byte 0x%02x", p.Decoded(), c)
			}
		}
		if strings.Count(s, "/") != strings.Count(p.Decoded(), "/") {
			t.Fatalf("escaped %q and decoded %q have different segments", s, p.Decoded())
		}
		u := &url.URL{}
		p.SetURL(u)
		if u.EscapedPath() != s {
			t.Fatalf("forwarded path %q differs from canonical %q", u.EscapedPath(), s)
		}
		if dec, err := url.PathUnescape(s); err != nil || dec != p.Decoded() {
			t.Fatalf("net/url decodes %q as %q (%v), kpath as %q", s, dec, err, p.Decoded())
		}
	})
}

func FuzzSplitProxyPath(f *testing.F) {
	for _, s := range []string{"/k8s/prod/api", "/k8s/prod", "/k8s//x", "/k8s/a%2Fb/c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		cluster, rest, err := SplitProxyPath(in)
		if err != nil {
			if !errors.Is(err, ErrNotCanonical) {
				t.Fatalf("error %v does not wrap ErrNotCanonical", err)
			}
			return
		}
		if ValidCluster(cluster) != nil {
			t.Fatalf("accepted cluster %q", cluster)
		}
		// The pieces reassemble into the input (modulo the root's optional slash).
		joined := Prefix + cluster + rest.String()
		if joined != in && joined != in+"/" {
			t.Fatalf("%q split into %q + %q", in, cluster, rest)
		}
		if _, err := Parse(rest.String()); err != nil {
			t.Fatalf("rest %q does not re-parse: %v", rest, err)
		}
	})
}
