package sessions

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/limenhq/limen/gateway/kpath"
	"github.com/limenhq/limen/gateway/reqinfo"
)

// classify runs both hops' classification on a request target.
func classify(t testing.TB, method, target string, header http.Header) (Stream, bool) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "https://worker/", nil)
	r.Method = method
	path, query, _ := strings.Cut(target, "?")
	r.URL.RawQuery = query
	p, err := kpath.Parse(path)
	if err != nil {
		t.Fatalf("%s: %v", target, err)
	}
	for k, v := range header {
		r.Header[k] = v
	}
	info, err := reqinfo.Classify(r, p)
	if err != nil {
		return Stream{}, false
	}
	return Classify(r, info), true
}

const logPath = "/api/v1/namespaces/a/pods/p/log"

// The spellings below are decided by the API server's converters: a bool
// query parameter is false only for "0" and any case of "false"; every other
// value, the empty one included, is true. Keys are case-sensitive, their
// first value wins, and both keys and values are percent-decoded first.
func TestClassifyFollowedLogs(t *testing.T) {
	tests := []struct {
		query  string
		kind   Kind
		target string
	}{
		{"follow=true", KindLogs, "a/p/"},
		{"follow=1", KindLogs, "a/p/"},
		{"follow=True", KindLogs, "a/p/"},
		{"follow=TRUE", KindLogs, "a/p/"},
		{"follow=t", KindLogs, "a/p/"},
		{"follow=f", KindLogs, "a/p/"},      // not a spelling of false
		{"follow=yes", KindLogs, "a/p/"},    // accepted: anything but 0/false
		{"follow=no", KindLogs, "a/p/"},     // likewise true
		{"follow=", KindLogs, "a/p/"},       // the empty value is true
		{"follow", KindLogs, "a/p/"},        // so is a bare key
		{"follow=2", KindLogs, "a/p/"},      // not a number test
		{"follow=%20", KindLogs, "a/p/"},    // a space is not false
		{"%66ollow=true", KindLogs, "a/p/"}, // escaped key
		{"follow=%74rue", KindLogs, "a/p/"}, // escaped value
		{"%66%6F%6C%6C%6F%77=%31", KindLogs, "a/p/"},
		{"fol%6Cow=TrUe&container=app", KindLogs, "a/p/app"},
		{"follow=true&follow=false", KindLogs, "a/p/"}, // the first value wins
		{"follow=false&follow=true", KindNone, ""},
		{"container=one&follow=1&container=two", KindLogs, "a/p/one"},
		{"follow=true&tailLines=10&timestamps=true&limitBytes=100", KindLogs, "a/p/"},
		{"follow=true&sinceTime=2024-01-02T03:04:05Z", KindLogs, "a/p/"},
		{"follow=true&stream=Stdout", KindLogs, "a/p/"},
		{"follow=0", KindNone, ""},
		{"follow=false", KindNone, ""},
		{"follow=FALSE", KindNone, ""},
		{"follow=False", KindNone, ""},
		{"follow=%30", KindNone, ""}, // escaped "0"
		{"", KindNone, ""},
		{"FOLLOW=true", KindNone, ""},     // keys are case-sensitive
		{"follow%3Dtrue", KindNone, ""},   // an escaped '=' is part of the key
		{"follow=true;x=1", KindNone, ""}, // a pair with ';' is dropped, as net/http drops it
		{"follow=%zz", KindNone, ""},      // a pair that does not unescape is dropped
		{"timestamps=true", KindNone, ""},
		// Options the API server cannot decode are a 400, not a stream.
		{"follow=true&sinceSeconds=abc", KindNone, ""},
		{"follow=true&tailLines=1.5", KindNone, ""},
		{"follow=true&limitBytes=0x10", KindNone, ""},
		{"follow=true&sinceTime=yesterday", KindNone, ""},
	}
	for _, tt := range tests {
		st, ok := classify(t, "GET", logPath+"?"+tt.query, nil)
		if !ok || st.Kind != tt.kind || st.Target != tt.target {
			t.Errorf("GET %s?%s: %+v (classified %v), want %q %q", logPath, tt.query, st, ok, tt.kind, tt.target)
		}
	}
}

func TestClassifyWatches(t *testing.T) {
	const list = "/api/v1/namespaces/a/configmaps"
	tests := []struct {
		method, target string
		kind           Kind
		wantTarget     string
	}{
		{"GET", list + "?watch=true", KindWatch, "a/configmaps"},
		{"GET", list + "?watch=1", KindWatch, "a/configmaps"},
		{"GET", list + "?watch=True", KindWatch, "a/configmaps"},
		{"GET", list + "?watch=yes", KindWatch, "a/configmaps"},
		{"GET", list + "?watch=", KindWatch, "a/configmaps"},
		{"GET", list + "?watch", KindWatch, "a/configmaps"},
		{"GET", list + "?%77atch=true", KindWatch, "a/configmaps"},
		{"GET", list + "?watch=true&watch=false", KindWatch, "a/configmaps"},
		{"GET", list + "?watch=1&resourceVersion=5&allowWatchBookmarks=true&timeoutSeconds=1800", KindWatch, "a/configmaps"},
		{"GET", list + "?fieldSelector=metadata.name%3Dx&watch=true", KindWatch, "a/configmaps/x"},
		{"GET", "/api/v1/watch/namespaces/a/configmaps", KindWatch, "a/configmaps"},
		{"GET", "/api/v1/watch/namespaces/a/configmaps/x", KindWatch, "a/configmaps/x"},
		{"GET", "/api/v1/watch/namespaces/a/configmaps?watch=false", KindWatch, "a/configmaps"}, // the path decides
		{"GET", "/api/v1/watch/pods", KindWatch, "pods"},
		{"GET", "/api/v1/pods?watch=true", KindWatch, "pods"},
		{"GET", "/apis/apps/v1/namespaces/a/deployments?watch=true", KindWatch, "a/deployments"},
		{"GET", list + "?watch=false", KindNone, ""},
		{"GET", list + "?watch=0", KindNone, ""},
		{"GET", list + "?watch=FALSE", KindNone, ""},
		{"GET", list + "?watch=false&watch=true", KindNone, ""},
		{"GET", list + "?WATCH=true", KindNone, ""},
		{"GET", list, KindNone, ""},
		{"GET", list + "/x?watch=true", KindNone, ""}, // a get of one object ignores watch
		{"POST", list + "?watch=true", KindNone, ""},
		{"DELETE", list + "?watch=true", KindNone, ""},
		// ListOptions the API server cannot decode are a 400.
		{"GET", list + "?watch=true&limit=abc", KindNone, ""},
		{"GET", list + "?watch=true&timeoutSeconds=1m", KindNone, ""},
		{"GET", "/api/v1/watch/namespaces/a/configmaps?timeoutSeconds=x", KindNone, ""},
	}
	for _, tt := range tests {
		st, ok := classify(t, tt.method, tt.target, nil)
		if !ok || st.Kind != tt.kind || st.Target != tt.wantTarget {
			t.Errorf("%s %s: %+v (classified %v), want %q %q", tt.method, tt.target, st, ok, tt.kind, tt.wantTarget)
		}
	}
}

func TestClassifyUpgradesAndProxies(t *testing.T) {
	spdy := http.Header{"Connection": {"Upgrade"}, "Upgrade": {"SPDY/3.1"}}
	ws := http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}}
	tests := []struct {
		method, target string
		header         http.Header
		kind           Kind
		wantTarget     string
	}{
		{"POST", "/api/v1/namespaces/a/pods/p/exec?command=sh&container=c&stdin=true", spdy, KindExec, "a/p/c"},
		{"GET", "/api/v1/namespaces/a/pods/p/exec?command=sh&container=c1&container=c2", ws, KindExec, "a/p/c1"},
		{"GET", "/api/v1/namespaces/a/pods/p/exec?command=sh&%63ontainer=c", ws, KindExec, "a/p/c"},
		{"POST", "/api/v1/namespaces/a/pods/p/attach?container=c", spdy, KindAttach, "a/p/c"},
		{"POST", "/api/v1/namespaces/a/pods/p/portforward?ports=80", spdy, KindPortForward, "a/p"},
		{"GET", "/api/v1/namespaces/a/pods/p/portforward", ws, KindPortForward, "a/p"},
		{"POST", "/api/v1/namespaces/a/pods/p/exec?command=sh", nil, KindNone, ""}, // not an upgrade: the API server answers 400
		{"POST", "/apis/x.example/v1/namespaces/a/pods/p/exec", spdy, KindNone, ""},
		{"GET", logPath + "?follow=1", ws, KindLogs, "a/p/"},
		{"GET", "/api/v1/namespaces/a/pods/p/proxy", nil, KindProxy, "pods/a/p"},
		{"GET", "/api/v1/namespaces/a/pods/p:8080/proxy/events?stream=1", nil, KindProxy, "pods/a/p:8080"},
		{"POST", "/api/v1/namespaces/a/pods/p/proxy/upload", nil, KindProxy, "pods/a/p"},
		{"GET", "/api/v1/namespaces/a/services/https:web:443/proxy", nil, KindProxy, "services/a/https:web:443"},
		{"GET", "/api/v1/namespaces/a/services/web/proxy/socket", ws, KindProxy, "services/a/web"},
		{"GET", "/api/v1/nodes/n1/proxy/logs", nil, KindProxy, "nodes/n1"},
		{"GET", "/api/v1/nodes/n1/proxy", nil, KindProxy, "nodes/n1"},
		{"GET", "/apis/x.example/v1/namespaces/a/pods/p/proxy", nil, KindNone, ""},
		{"GET", "/api/v1/namespaces/a/configmaps/c/proxy", nil, KindNone, ""},
		{"GET", "/api/v1/proxy/namespaces/a/pods/p", nil, KindNone, ""}, // removed from the API server long ago
		{"GET", "/api/v1/namespaces/a/pods/p", ws, KindNone, ""},
		{"GET", "/version", nil, KindNone, ""},
		{"GET", "/apis", nil, KindNone, ""},
		{"GET", "/api/v1/namespaces/a/pods?limit=500", nil, KindNone, ""},
	}
	for _, tt := range tests {
		st, ok := classify(t, tt.method, tt.target, tt.header)
		if !ok || st.Kind != tt.kind || st.Target != tt.wantTarget {
			t.Errorf("%s %s %v: %+v (classified %v), want %q %q", tt.method, tt.target, tt.header, st, ok, tt.kind, tt.wantTarget)
		}
	}
}

// escapeAll percent-escapes every byte of s: a spelling the API server
// decodes back to s.
func escapeAll(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "%%%02X", s[i])
	}
	return b.String()
}

func FuzzClassify(f *testing.F) {
	f.Add("GET", logPath, "follow=True&container=c", false)
	f.Add("GET", "/api/v1/namespaces/a/configmaps", "%77atch=1&limit=5", false)
	f.Add("GET", "/api/v1/watch/namespaces/a/configmaps/x", "timeoutSeconds=x", false)
	f.Add("POST", "/api/v1/namespaces/a/pods/p/exec", "command=sh&container=c", true)
	f.Add("GET", "/api/v1/nodes/n/proxy/x", "", false)
	f.Add("GET", logPath, "follow=true;x&sinceSeconds=1&follow=0", false)
	f.Fuzz(func(t *testing.T, method, path, query string, upgrade bool) {
		p, err := kpath.Parse(path)
		if err != nil || method == "" || strings.ContainsAny(method, " \r\n\t") {
			return
		}
		h := http.Header{}
		if upgrade {
			h.Set("Connection", "Upgrade")
			h.Set("Upgrade", "SPDY/3.1")
		}
		st, ok := classify(t, method, p.String()+"?"+query, h)
		if !ok {
			return
		}
		if st.Kind != KindNone && !st.Kind.listed() {
			t.Fatalf("%s %s?%s: kind %q is not a session kind", method, p, query, st.Kind)
		}
		if (st.Kind == KindNone) != (st.Target == "") {
			t.Fatalf("%s %s?%s: kind %q with target %q", method, p, query, st.Kind, st.Target)
		}
		if !upgrade && (st.Kind == KindExec || st.Kind == KindAttach || st.Kind == KindPortForward) {
			t.Fatalf("%s %s?%s: %s without an upgrade", method, p, query, st.Kind)
		}
		// The API server reads the decoded pairs, not their spelling: the
		// same pairs encoded canonically, or with every byte escaped, must
		// be classified alike.
		values, _ := url.ParseQuery(query)
		var escaped []string
		for k, vs := range values {
			for _, v := range vs {
				escaped = append(escaped, escapeAll(k)+"="+escapeAll(v))
			}
		}
		for _, respelled := range []string{values.Encode(), strings.Join(escaped, "&")} {
			again, ok := classify(t, method, p.String()+"?"+respelled, h)
			if !ok || again != st {
				// Map order can reorder keys but never the values of one key.
				t.Fatalf("%s %s: ?%s is %+v but the same pairs as ?%s are %+v (classified %v)",
					method, p, query, st, respelled, again, ok)
			}
		}
	})
}
