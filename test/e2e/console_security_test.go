package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/test/gatewaytest"
)

// consoleClient is a browser stand-in for the console of the shared proxy,
// over plain HTTP (no JavaScript is needed): a cookie jar, the proxy's CA,
// redirects not followed.
func consoleClient(t *testing.T, e *gatewaytest.Env) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(filepath.Join(e.ProxyDataDir(), "ca", "root.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, Timeout: 60 * time.Second,
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

var consoleCSRF = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// consoleSignIn signs user in with their password.
func consoleSignIn(t *testing.T, c *http.Client, base, user string) {
	t.Helper()
	resp, err := c.Get(base + "/console/signin")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := consoleCSRF.FindSubmatch(b)
	if m == nil {
		t.Fatalf("the sign-in page has no CSRF token:\n%s", b)
	}
	resp, err = c.PostForm(base+"/console/signin", url.Values{"user": {user}, "password": {password(user)}, "csrf": {string(m[1])}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in as %s: %d", user, resp.StatusCode)
	}
}

// storedSince is every event of the proxy's audit trail that q selects.
func storedSince(t *testing.T, q audit.Query) []audit.Event {
	t.Helper()
	st, err := audit.Open(context.Background(), audit.Path(proxyDataDir(t)), audit.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("open audit store: %v", err)
	}
	defer st.Close()
	evs, err := st.Search(context.Background(), q)
	if err != nil {
		t.Fatalf("audit search: %v", err)
	}
	return evs
}

// consoleLoginID is the login id of user's console sign-in stored since t0.
func consoleLoginID(t *testing.T, user string, t0 time.Time) string {
	t.Helper()
	for _, ev := range storedSince(t, audit.Query{Type: audit.TypeAuthLogin, User: user, Since: t0}) {
		if ev.Fields["client"] == "console" && ev.Fields["login_id"] != "" {
			return ev.Fields["login_id"]
		}
	}
	t.Fatalf("no console auth.login of %s stored since %s", user, t0)
	return ""
}

// kubeSentSince is every kube.sent of user stored since t0.
func kubeSentSince(t *testing.T, user string, t0 time.Time) []audit.Event {
	t.Helper()
	return storedSince(t, audit.Query{Type: audit.TypeKubeSent, User: user, Since: t0})
}

// TestConsoleAccessClusterIsAName: the console's "what may I do" asks the
// real API server through the real proxy and worker; a cluster parameter
// that is a path (issue #30, item 2) is refused with 400, and no request
// but the rules review is ever sent as the user — checked on the proxy's
// own audit trail.
func TestConsoleAccessClusterIsAName(t *testing.T) {
	e := gateway(t)
	base := "https://" + e.ProxyAddr
	c := consoleClient(t, e)
	t0 := time.Now().Add(-time.Second)
	consoleSignIn(t, c, base, "alice")
	login := consoleLoginID(t, "alice", t0)
	ask := func(cluster string) int {
		t.Helper()
		resp, err := c.Get(base + "/console/access?" + url.Values{"cluster": {cluster}, "namespace": {"default"}}.Encode())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, bad := range []string{
		gatewaytest.ClusterName + "/api/v1/namespaces/default/configmaps?x=",
		gatewaytest.ClusterName + "/api/v1/namespaces/default/services/web:80/proxy/x?y=",
		gatewaytest.ClusterName + "?x=",
	} {
		if st := ask(bad); st != http.StatusBadRequest {
			t.Errorf("cluster %q: %d, want 400", bad, st)
		}
	}
	if st := ask(gatewaytest.ClusterName); st != http.StatusOK {
		t.Fatalf("cluster %s: %d, want 200", gatewaytest.ClusterName, st)
	}
	sent := kubeSentSince(t, "alice", t0)
	reviews := 0
	for _, ev := range sent {
		// Other tests act as alice through kubectl at the same time; the
		// console's requests carry its sign-in's login id.
		if ev.Principal.LoginID != login {
			continue
		}
		if ev.Kube.Resource != "selfsubjectrulesreviews" {
			t.Errorf("kube.sent as alice for %s %s, want only selfsubjectrulesreviews", ev.Kube.Method, ev.Kube.Path)
			continue
		}
		reviews++
	}
	if reviews != 1 {
		t.Errorf("%d rules reviews sent as alice, want 1 (the honest question's)", reviews)
	}
}
