package doctor

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// TestConnFailures: a probe tells apart a server that is unreachable, one
// whose certificate is untrusted, for another name, or expired, and one
// that refuses our client certificate; each says what to do.
func TestConnFailures(t *testing.T) {
	ca, other := newTestCA(t), newTestCA(t)
	later := time.Now().Add(time.Hour)
	good := tlsServer(t, ca.issue(t, []string{"127.0.0.1"}, later, false), ca, nil)
	tests := []struct {
		name   string
		url    string
		client *http.Client
		words  []string // empty: the probe succeeds
	}{
		{name: "trusted", url: good.URL, client: client(ca.pool())},
		{name: "trusted, our certificate accepted", url: good.URL, client: client(ca.pool(), ca.issue(t, []string{"worker"}, later, true))},
		{name: "unreachable", url: "https://" + closedAddr(t), client: client(ca.pool()), words: []string{"unreachable", "connection refused"}},
		{name: "untrusted", url: good.URL, client: client(other.pool()), words: []string{"not trusted", "not signed by the test CA"}},
		{name: "name mismatch", url: tlsServer(t, ca.issue(t, []string{"other.example"}, later, false), nil, nil).URL,
			client: client(ca.pool()), words: []string{"for another name: it names other.example, not 127.0.0.1"}},
		{name: "expired", url: tlsServer(t, ca.issue(t, []string{"127.0.0.1"}, time.Now().Add(-time.Minute), false), nil, nil).URL,
			client: client(ca.pool()), words: []string{"expired or not yet valid"}},
		{name: "our certificate refused", url: good.URL, client: client(ca.pool(), other.issue(t, []string{"worker"}, later, true)),
			words: []string{"refused our certificate", "unknown certificate authority"}},
		{name: "our certificate expired", url: good.URL, client: client(ca.pool(), ca.issue(t, []string{"worker"}, time.Now().Add(-time.Minute), true)),
			words: []string{"refused our certificate", "expired"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := probe(context.Background(), tt.client, tt.url+"/", nil, DefaultTimeout, time.Now)
			if len(tt.words) == 0 {
				if p.Err != nil || p.Status != http.StatusNotFound {
					t.Fatalf("probe: %d, %v; want the server's 404", p.Status, p.Err)
				}
				return
			}
			if p.Err == nil {
				t.Fatalf("probe succeeded, want a failure saying %q", tt.words)
			}
			found, fix := connFailure("the server", p, "the test CA")
			wantResult(t, fail("server", found, fix), Fail, tt.words...)
		})
	}
}

// TestClock: the skew measured from a server's Date header is ok within
// bounds, warns and then fails beyond them in either direction, and a
// server without a Date header or that did not answer is not judged.
func TestClock(t *testing.T) {
	ca := newTestCA(t)
	cert := ca.issue(t, []string{"127.0.0.1"}, time.Now().Add(time.Hour), false)
	s := tlsServer(t, cert, nil, nil)
	noDate := tlsServer(t, cert, nil, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header()["Date"] = nil // net/http then sends none
	}))
	tests := []struct {
		name   string
		url    string
		shift  time.Duration // this machine's clock against the server's
		status Status
		words  []string
	}{
		{name: "in step", url: s.URL, status: OK, words: []string{"agrees with"}},
		{name: "server ahead", url: s.URL, shift: -45 * time.Second, status: Warn, words: []string{"ahead of", "more than 30s"}},
		{name: "server behind", url: s.URL, shift: 45 * time.Second, status: Warn, words: []string{"behind"}},
		{name: "far ahead", url: s.URL, shift: -5 * time.Minute, status: Fail, words: []string{"ahead of", "more than 1m0s", "the why"}},
		{name: "far behind", url: s.URL, shift: time.Hour, status: Fail, words: []string{"behind", "more than 1m0s"}},
		{name: "no Date header", url: noDate.URL, status: Warn, words: []string{"no Date header"}},
		{name: "no answer", url: "https://" + closedAddr(t), status: Skip, words: []string{"did not answer"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := func() time.Time { return time.Now().Add(tt.shift) }
			p := probe(context.Background(), client(ca.pool()), tt.url+"/", nil, DefaultTimeout, now)
			wantResult(t, Clock("clock", "the server", p, 30*time.Second, time.Minute, "the why"), tt.status, tt.words...)
		})
	}
}
