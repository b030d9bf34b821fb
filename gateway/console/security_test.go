package console_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/limenhq/limen/gateway/access"
	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/console"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/recstore"
	"github.com/limenhq/limen/gateway/sessions"
)

// The "what may I do" page asks about a cluster by name only: a value that
// is not a DNS label (a path, a query, upper case) is refused with 400 and
// never reaches the computation (issue #30, item 2; the proxy refuses it
// too, gateway/proxy TestAccessRefusesAClusterThatIsAPath).
func TestAccessPageRefusesABadCluster(t *testing.T) {
	asked := 0
	stand := func(_ context.Context, p identity.Principal, _ time.Time, cluster, ns string) (access.Report, error) {
		asked++
		return access.Report{Cluster: cluster, Namespace: ns, Client: p.ClientID}, nil
	}
	e := newEnvWith(t, stand)
	c := e.client(t)
	signIn(t, c, e, "bob", "bob-password-1")
	for _, cluster := range []string{"demo/api/v1/namespaces/default/configmaps?x=", "demo/api", "demo?x=", "Demo", "-demo", "..",
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"} {
		st, _, _ := page(t, c, e, "/console/access?"+url.Values{"cluster": {cluster}, "namespace": {"default"}}.Encode())
		if st != http.StatusBadRequest {
			t.Errorf("cluster %q: %d, want 400", cluster, st)
		}
	}
	if asked != 0 {
		t.Errorf("the computation was asked %d times about a bad cluster name", asked)
	}
	if st, _, _ := page(t, c, e, "/console/access?cluster=demo"); st != http.StatusOK || asked != 1 {
		t.Errorf("cluster demo: %d, asked %d times; want 200, asked once", st, asked)
	}
}

// liveEnv is a console whose live view streams a stand-in recording (the
// worker's stream, named as such: the e2e watches a real one) of the live
// exec session "live-1", on a clock the test moves.
type liveEnv struct {
	*env
	clock atomic.Int64
	feeds chan *io.PipeWriter
}

func newLiveEnv(t *testing.T) *liveEnv {
	t.Helper()
	le := &liveEnv{feeds: make(chan *io.PipeWriter, 1)}
	le.clock.Store(time.Now().UnixNano())
	le.env = newEnvWith(t, nil, func(_ *env, c *console.Config) {
		c.Now = le.now
		c.Observe = func(context.Context, sessions.Info) (io.ReadCloser, error) {
			pr, pw := io.Pipe()
			t.Cleanup(func() { pw.Close() })
			le.feeds <- pw
			return pr, nil
		}
	})
	live, err := le.regist.Register(context.Background(), sessions.Session{ID: "live-1", Cluster: "demo", Kind: sessions.KindExec,
		Target: "default/web/app", Principal: identity.Principal{Kind: identity.KindUser, Name: "bob", ClientID: identity.ClientKubectl}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { live.End(sessions.ReasonCompleted) })
	return le
}

func (le *liveEnv) now() time.Time { return time.Unix(0, le.clock.Load()) }

// watch opens the live view of live-1 in c's sign-in and starts the
// session's output: a header, then a line every 50 ms until the console
// closes the stream.
func (le *liveEnv) watch(t *testing.T, c *http.Client) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{TLSClientConfig: le.srv.Client().Transport.(*http.Transport).TLSClientConfig, Jar: c.Jar}
	ws, resp, err := d.Dial("wss://"+strings.TrimPrefix(le.srv.URL, "https://")+"/console/sessions/live-1/live.ws", nil)
	if err != nil {
		t.Fatalf("open the live view: %v (%v)", err, resp)
	}
	t.Cleanup(func() { ws.Close() })
	pw := <-le.feeds
	go func() {
		if _, err := io.WriteString(pw, `{"version":3,"term":{"cols":80,"rows":24}}`+"\n"); err != nil {
			return
		}
		for {
			if _, err := io.WriteString(pw, `[0.05,"o","tick\r\n"]`+"\n"); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	for seen := false; !seen; {
		var m map[string]string
		_ = ws.SetReadDeadline(time.Now().Add(5 * time.Second))
		if err := ws.ReadJSON(&m); err != nil {
			t.Fatalf("the live view sent no output: %v", err)
		}
		seen = m["o"] != ""
	}
	return ws
}

// A live view ends within a second once its watcher is locked, signs out,
// or their sign-in expires (issue #30, item 5): the socket gets an end
// message saying why, then closes.
func TestLiveViewEndsWhenTheWatcherLosesTheSignIn(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, le *liveEnv, c *http.Client)
	}{
		{"locked", func(t *testing.T, le *liveEnv, c *http.Client) {
			le.locks.Apply(locks.Change{Op: locks.OpSet, Lock: locks.Lock{Target: locks.Target{Kind: identity.KindUser, Name: "dana"},
				Reason: "incident", CreatedBy: "user:root", CreatedAt: le.now()}})
		}},
		{"signed out", func(t *testing.T, le *liveEnv, c *http.Client) {
			_, _, tok := page(t, c, le.env, "/console/sessions")
			if resp := post(t, c, le.env, "/console/signout", url.Values{"csrf": {tok}}); resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("sign out: %d", resp.StatusCode)
			}
		}},
		{"sign-in expired", func(t *testing.T, le *liveEnv, c *http.Client) {
			le.clock.Add(int64(console.DefaultSessionTTL + time.Second))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			le := newLiveEnv(t)
			c := le.client(t)
			signIn(t, c, le.env, "dana", "dana-password-1")
			ws := le.watch(t, c)
			tc.end(t, le, c)
			start := time.Now()
			_ = ws.SetReadDeadline(start.Add(time.Second))
			for {
				var m map[string]string
				if err := ws.ReadJSON(&m); err != nil {
					t.Fatalf("the live view went on for %s after the watcher was %s, with no end message (%v)", time.Since(start).Round(time.Millisecond), tc.name, err)
				}
				if m["end"] != "" {
					t.Logf("ended after %s: %q", time.Since(start).Round(time.Millisecond), m["end"])
					break
				}
			}
			if _, _, err := ws.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.ClosePolicyViolation) {
				t.Fatalf("after the end message: %v, want the socket closed", err)
			}
		})
	}
}

// TestLiveViewLastsWhileSignedIn: the guard's recheck finds the same
// sign-in again (the store answers with a fresh value each time, shared
// by every proxy on PostgreSQL), so a watcher who stays signed in keeps
// the view past several rechecks.
func TestLiveViewLastsWhileSignedIn(t *testing.T) {
	le := newLiveEnv(t)
	c := le.client(t)
	signIn(t, c, le.env, "dana", "dana-password-1")
	ws := le.watch(t, c)
	_ = ws.SetReadDeadline(time.Now().Add(5 * liveRecheckForTest))
	for {
		var m map[string]string
		if err := ws.ReadJSON(&m); err != nil {
			return // still open when the deadline came: what we want
		}
		if strings.Contains(m["end"], "sign-in") {
			t.Fatalf("a signed-in watcher's live view ended: %q", m["end"])
		}
	}
}

// liveRecheckForTest is console.liveRecheck (200 ms), which the test
// outlasts several times.
const liveRecheckForTest = 200 * time.Millisecond

// storeRecording puts a finished recording of cluster demo in the store,
// as an upload leaves it (the cast and its checksum file).
func storeRecording(t *testing.T, e *env, id, cast string) {
	t.Helper()
	dir := filepath.Join(recstore.Path(e.dir), "demo")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(cast))
	if err := os.WriteFile(filepath.Join(dir, id+".cast"), []byte(cast), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, id+".cast.sha256"), []byte(hex.EncodeToString(sum[:])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// stored returns the stored events of typ.
func stored(t *testing.T, e *env, typ audit.Type) []audit.Event {
	t.Helper()
	evs, err := e.audit.Search(context.Background(), audit.Query{Type: typ})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// Playing or downloading a recording, and searching the audit trail, are
// audited, by whom and what (issue #30, item 6): recording.view with the
// recording's session id and how it was read, audit.search with the
// filters.
func TestRecordingViewAndAuditSearchAudited(t *testing.T) {
	e := newEnv(t)
	storeRecording(t, e, "rec-1", `{"version":3,"term":{"cols":80,"rows":24}}`+"\n"+`[0.1,"o","hello\r\n"]`+"\n")
	c := e.client(t)
	signIn(t, c, e, "dana", "dana-password-1")
	for _, path := range []string{"/console/api/recordings/rec-1", "/console/api/recordings/rec-1?download=1"} {
		if st, body, _ := page(t, c, e, path); st != http.StatusOK || !strings.Contains(body, "hello") {
			t.Fatalf("GET %s: %d %q", path, st, body)
		}
	}
	views := stored(t, e, audit.TypeRecordingView)
	if len(views) != 2 {
		t.Fatalf("%d recording.view events stored, want 2 (play, download): %+v", len(views), views)
	}
	for i, mode := range []string{"play", "download"} {
		v := views[i]
		if v.Principal.Name != "dana" || v.Principal.ClientID != console.ClientID || v.SessionID != "rec-1" || v.Cluster != "demo" || v.Fields["mode"] != mode {
			t.Errorf("recording.view %d: %+v, want dana's %s of rec-1 on demo", i, v, mode)
		}
	}
	// A refused look (bob may not see a recording whose owner is unknown)
	// is an auth.denied, not a view.
	bob := e.client(t)
	signIn(t, bob, e, "bob", "bob-password-1")
	if st, _, _ := page(t, bob, e, "/console/api/recordings/rec-1"); st != http.StatusNotFound {
		t.Fatalf("bob GET someone's recording: %d, want 404", st)
	}
	if n := len(stored(t, e, audit.TypeRecordingView)); n != 2 {
		t.Errorf("%d recording.view events after bob's refused look, want still 2", n)
	}

	for _, path := range []string{"/console/audit?user=bob&type=auth.login", "/console/api/audit?cluster=demo"} {
		if st, body, _ := page(t, c, e, path); st != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, st, body)
		}
	}
	searches := stored(t, e, audit.TypeAuditSearch)
	if len(searches) != 2 {
		t.Fatalf("%d audit.search events stored, want 2: %+v", len(searches), searches)
	}
	if s := searches[0]; s.Principal.Name != "dana" || s.Fields["user"] != "bob" || s.Fields["type"] != "auth.login" || s.Fields["download"] != "" {
		t.Errorf("the page's audit.search: %+v, want dana's, user=bob type=auth.login", s)
	}
	if s := searches[1]; s.Principal.Name != "dana" || s.Fields["cluster"] != "demo" || s.Fields["download"] != "true" {
		t.Errorf("the download's audit.search: %+v, want dana's, cluster=demo, download", s)
	}
}

// Every console cookie is a __Host- cookie: Secure, Path=/, no Domain, so
// no other host or path can set or shadow it (issue #30, hardening).
func TestConsoleCookiesAreHostCookies(t *testing.T) {
	e := newEnvWith(t, nil, func(e *env, c *console.Config) {
		c.OIDC = func(redirect string) console.OIDCFlow { return standInFlow{redirect} }
		c.OIDCRedirectURL = e.srv.URL + "/console/oidc/callback"
	})
	c := e.client(t)
	var set []*http.Cookie
	collect := func(resp *http.Response) { set = append(set, resp.Cookies()...) }
	resp, _ := get(t, c, e.srv.URL+"/console/signin")
	collect(resp)
	collect(signIn(t, c, e, "dana", "dana-password-1"))
	_, _, tok := page(t, c, e, "/console/sessions")
	collect(post(t, c, e, "/console/signout", url.Values{"csrf": {tok}}))
	resp, _ = get(t, c, e.srv.URL+"/console/oidc")
	collect(resp)
	resp, _ = get(t, c, e.srv.URL+"/console/oidc/callback?state=x&code=y")
	collect(resp)
	names := map[string]bool{}
	for _, ck := range set {
		names[ck.Name] = true
		if !strings.HasPrefix(ck.Name, "__Host-") || !ck.Secure || ck.Path != "/" || ck.Domain != "" || !ck.HttpOnly {
			t.Errorf("cookie %s (Secure %v, Path %q, Domain %q, HttpOnly %v): want __Host-, Secure, Path=/, no Domain, HttpOnly",
				ck.Name, ck.Secure, ck.Path, ck.Domain, ck.HttpOnly)
		}
	}
	if len(names) < 3 {
		t.Errorf("cookies seen: %v, want the sign-in, pre-sign-in and OIDC ones", names)
	}
}

// The sign-in page says why only in its own words: a reason in the query
// string is a code from a fixed set, and free text there is never shown
// (issue #30, hardening).
func TestSignInPageShowsNoFreeText(t *testing.T) {
	e := newEnv(t)
	c := e.client(t)
	if _, body, _ := page(t, c, e, "/console/signin?"+url.Values{"why": {"Your account is suspended: call 555-0100"}}.Encode()); strings.Contains(body, "555-0100") {
		t.Fatalf("the sign-in page echoes the query's text:\n%s", body)
	}
	// Signed out, a page sends to the sign-in page with a code it knows.
	resp, _ := get(t, c, e.srv.URL+"/console/sessions")
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/console/signin") {
		t.Fatalf("signed out: %d to %q", resp.StatusCode, loc)
	}
	if _, body, _ := page(t, c, e, loc); !strings.Contains(body, `id="why"`) || !strings.Contains(body, "sign in") {
		t.Fatalf("the sign-in page after %s says nothing:\n%s", loc, body)
	}
}

// A locked person's password sign-in is refused before auth.login is
// stored.
func TestPasswordSignInLockedRefusedBeforeLogin(t *testing.T) {
	e := newEnv(t)
	e.locks.Apply(locks.Change{Op: locks.OpSet, Lock: locks.Lock{Target: locks.Target{Kind: identity.KindUser, Name: "bob"},
		Reason: "incident", CreatedBy: "user:dana", CreatedAt: e.clock}})
	c := e.client(t)
	if resp := signIn(t, c, e, "bob", "bob-password-1"); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("locked bob signs in: %d, want 403", resp.StatusCode)
	}
	if logins := stored(t, e, audit.TypeAuthLogin); len(logins) != 0 {
		t.Fatalf("a locked person's sign-in stored auth.login: %+v", logins)
	}
}
