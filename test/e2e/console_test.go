package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/chromedp"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/test/cluster/clustertest"
	"github.com/limenhq/limen/test/gatewaytest"
)

// The console in a real browser (Debian's chromium, driven by chromedp)
// against the shared control plane, proxy and worker: every bullet of
// issue #16's "Tests, in a real browser".

// consoleShots is where the console tests save a screenshot per page:
// $LIMEN_CONSOLE_SCREENSHOTS, or limen-console-screenshots in the temporary
// directory. They stay after the run, as its artifacts.
func consoleShots(t *testing.T) string {
	dir := os.Getenv("LIMEN_CONSOLE_SCREENSHOTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "limen-console-screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// consoleBrowser starts a headless chromium of its own (its own cookies) and
// returns a tab's context.
func consoleBrowser(t *testing.T) context.Context {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed: the console's browser tests need Debian's chromium (.ci/run installs it): %v", err)
	}
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]), chromedp.ExecPath(bin), chromedp.WSURLReadTimeout(time.Minute),
		// The proxy's certificate is from its own CA, which the browser
		// does not know; the tests check the console, not the PKI.
		chromedp.Flag("ignore-certificate-errors", true),
		chromedp.NoSandbox, chromedp.WindowSize(1280, 900))
	// Chromium sometimes exits before it serves DevTools on a loaded
	// machine ("chrome failed to start" with nothing said): a new process
	// gets a second and a third chance; a browser that never starts fails.
	var errs []error
	for range 3 {
		var out bytes.Buffer // what chromium said, for the failure
		alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(slices.Clone(opts), chromedp.CombinedOutput(&out))...)
		ctx, cancel := chromedp.NewContext(alloc)
		if err := chromedp.Do(ctx); err != nil {
			cancel()
			cancelAlloc()
			errs = append(errs, fmt.Errorf("%w: %s", err, bytes.TrimSpace(out.Bytes())))
			continue
		}
		t.Cleanup(func() { cancel(); cancelAlloc() })
		return ctx
	}
	t.Fatalf("start chromium: %v", errors.Join(errs...))
	return nil
}

// css finds elements by CSS selector exactly (a plain string selector is
// DevTools' search, which also matches text and attribute values).
func css(sel string) chromedp.QueryOption {
	return chromedp.ByFunc(func(ctx context.Context, t *chromedp.Target, n *chromedp.Node) ([]cdp.NodeID, error) {
		res, err := cdp.Call(ctx, t, dom.QuerySelectorAll, dom.QuerySelectorAllParams{NodeID: n.NodeID, Selector: sel})
		return res.NodeIDs, err
	})
}

// run runs browser actions with a deadline.
func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// get runs one browser action that returns a value, with a deadline.
func get[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// text returns the text of the first element matching the CSS selector.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return get(t, ctx, "read "+sel, chromedp.Text(sel, css(sel)))
}

// eval evaluates a JavaScript expression (awaiting a promise) in the page.
func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	return get(t, ctx, "evaluate "+js, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
}

// waitJS waits until the JavaScript condition holds on the page, polling:
// after a click, the old page may still be the one answering.
func waitJS(t *testing.T, ctx context.Context, what, cond string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !eval[bool](t, ctx, "document.readyState === 'complete' && ("+cond+")") {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s did not hold within 10s; the page says:\n%s", what, cond, text(t, ctx, "main"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// screenshot saves the page at 1280 and at 400 px wide, and fails if at
// 400 px the page is wider than the window: it must work there.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := consoleShots(t)
	for _, width := range []int64{1280, 400} {
		run(t, ctx, "viewport", chromedp.EmulateViewport(width, 900))
		png := get(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
		file := filepath.Join(dir, fmt.Sprintf("%s-%d.png", name, width))
		if err := os.WriteFile(file, png, 0o644); err != nil {
			t.Fatal(err)
		}
		if width == 400 {
			if over := eval[float64](t, ctx, "document.documentElement.scrollWidth - window.innerWidth"); over > 0 {
				t.Errorf("%s at 400 px is %v px wider than the window (see %s)", name, over, file)
			}
		}
	}
	run(t, ctx, "reset viewport", chromedp.EmulateViewport(1280, 900))
	// Every control has a label (its own text, a <label>, or aria-label),
	// and none is taken out of the keyboard's reach.
	unlabelled := eval[[]string](t, ctx, `[...document.querySelectorAll('input:not([type=hidden]), select, textarea, button, a[href]')]
		.filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label') && !e.textContent.trim() || e.tabIndex < 0)
		.map(e => e.outerHTML.slice(0, 120))`)
	if len(unlabelled) > 0 {
		t.Errorf("%s: controls without a label or out of keyboard reach: %q", name, unlabelled)
	}
}

// signIn signs in on the console's sign-in page.
func signIn(t *testing.T, ctx context.Context, base, user, password string) {
	t.Helper()
	run(t, ctx, "sign in as "+user,
		chromedp.Navigate(base+"/console/signin"),
		chromedp.WaitVisible("#user", css("#user")),
		chromedp.SendKeys("#user", user, css("#user")),
		chromedp.SendKeys("#password", password, css("#password")),
		chromedp.Submit("#signin", css("#signin")),
	)
	// The answer is another page, or the sign-in page again with why.
	waitJS(t, ctx, "sign in as "+user, `location.pathname !== '/console/signin' || !!document.getElementById('why')`)
}

func password(user string) string {
	for _, u := range gatewaytest.Users {
		if u.Name == user {
			return u.Password
		}
	}
	panic("no demo user " + user)
}

// waitFor reloads url until the page satisfies cond (a JavaScript
// expression), or fails after d.
func waitFor(t *testing.T, ctx context.Context, url, cond string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		run(t, ctx, "open "+url, chromedp.Navigate(url), chromedp.WaitReady("body", css("body")))
		if eval[bool](t, ctx, cond) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s did not hold within %s; the page says:\n%s", url, cond, d, text(t, ctx, "main"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

var tickRE = regexp.MustCompile(`console-tick-(\d+)`)

// consoleTick is the highest tick number in s, or -1.
func consoleTick(s string) int {
	n := -1
	for _, m := range tickRE.FindAllStringSubmatch(s, -1) {
		if v, _ := strconv.Atoi(m[1]); v > n {
			n = v
		}
	}
	return n
}

func TestConsole(t *testing.T) {
	e := gateway(t)
	base := "https://" + e.ProxyAddr
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "console-pod", []string{"sleep", "3600"}, false)
	kc := userKubeconfig(t, "alice")
	admin := consoleBrowser(t)

	t.Run("sign in, and be refused with a wrong password", func(t *testing.T) {
		signIn(t, admin, base, "admin", "not-the-password")
		if got := text(t, admin, "#why"); !strings.Contains(got, "Wrong user name or password") {
			t.Fatalf("wrong password: the page says %q", got)
		}
		screenshot(t, admin, "signin")
		signIn(t, admin, base, "admin", password("admin"))
		loc := get(t, admin, "location", chromedp.Location())
		if !strings.HasSuffix(loc, "/console/sessions") {
			t.Fatalf("signed in, the browser is at %s, want the Sessions page:\n%s", loc, text(t, admin, "main"))
		}
		// The cookie is HttpOnly: the page's script cannot read it.
		if c := eval[string](t, admin, "document.cookie"); strings.Contains(c, "limen_console=") {
			t.Fatalf("the sign-in cookie is readable by script: %q", c)
		}
	})

	// alice's exec prints a numbered tick every 200 ms until it is killed.
	_, execDone := openStream(t, kc, "-n", ns, "exec", "console-pod", "--",
		"sh", "-c", "i=0; while true; do i=$((i+1)); echo console-tick-$i; sleep 0.2; done")
	id := waitOpen(t, "exec", 1)[0]
	for _, i := range listSessions(t, e) {
		if i.Live() && i.Kind == "exec" && i.Principal.Name == "alice" {
			id = i.ID
		}
	}

	t.Run("see the kubectl exec in Sessions", func(t *testing.T) {
		waitFor(t, admin, base+"/console/sessions", fmt.Sprintf(`!!document.querySelector('tr[data-session=%q].live')`, id), 10*time.Second)
		row := text(t, admin, fmt.Sprintf(`tr[data-session=%q]`, id))
		for _, want := range []string{"alice", "kubectl", "demo", "exec", ns + "/console-pod"} {
			if !strings.Contains(row, want) {
				t.Errorf("the session's row %q lacks %q", row, want)
			}
		}
		screenshot(t, admin, "sessions")
	})

	t.Run("watch the live view while the command runs", func(t *testing.T) {
		run(t, admin, "open the live view", chromedp.Navigate(base+"/console/sessions/"+id+"/live"),
			chromedp.WaitVisible("#live-output", css("#live-output")))
		// Output arrives while it runs: a tick, then a later one, in the
		// same page, with no reload.
		first := -1
		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) {
			n := consoleTick(eval[string](t, admin, "document.getElementById('live-output').textContent"))
			if first < 0 && n >= 0 {
				first = n
			}
			if first >= 0 && n > first+2 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		out := eval[string](t, admin, "document.getElementById('live-output').textContent")
		if first < 0 || consoleTick(out) <= first+2 {
			t.Fatalf("the live view did not show the output arriving (first tick %d, now %d); status %q, output %q",
				first, consoleTick(out), text(t, admin, "#live-status"), out)
		}
		screenshot(t, admin, "live")
		// Watching is audited.
		waitAudit(t, "session.observe", func(ev audit.Event) bool {
			return ev.Type == "session.observe" && ev.SessionID == id && ev.Principal.Name == "admin" && ev.Principal.ClientID == "console"
		})
	})

	t.Run("kill the session from the UI; kubectl exec ends within 1s", func(t *testing.T) {
		// A second browser watches live: its view must end with the session.
		watcher := consoleBrowser(t)
		signIn(t, watcher, base, "admin", password("admin"))
		run(t, watcher, "open the live view", chromedp.Navigate(base+"/console/sessions/"+id+"/live"),
			chromedp.WaitVisible("#live-output", css("#live-output")))
		run(t, admin, "open Sessions", chromedp.Navigate(base+"/console/sessions"),
			chromedp.WaitVisible(fmt.Sprintf(`button[aria-label="Kill session %s"]`, id), css(fmt.Sprintf(`button[aria-label="Kill session %s"]`, id))))
		start := time.Now()
		run(t, admin, "click Kill", chromedp.Click(fmt.Sprintf(`button[aria-label="Kill session %s"]`, id), css(fmt.Sprintf(`button[aria-label="Kill session %s"]`, id))))
		select {
		case <-execDone:
			withinASecond(t, "console kill → kubectl exec end", []time.Duration{time.Since(start)})
		case <-time.After(5 * time.Second):
			t.Fatal("kubectl exec still runs 5s after Kill was clicked")
		}
		waitJS(t, admin, "after Kill", fmt.Sprintf(`(document.querySelector('.done') || {}).textContent === 'Session %s killed.'`, id))
		deadline := time.Now().Add(10 * time.Second)
		for eval[string](t, watcher, "document.getElementById('live-output').dataset.ended || ''") != "killed" {
			if time.Now().After(deadline) {
				t.Fatalf("the live view did not end with the session; it says %q", text(t, watcher, "#live-status"))
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	t.Run("play the recording", func(t *testing.T) {
		waitFor(t, admin, base+"/console/recordings", fmt.Sprintf(`!!document.querySelector('tr[data-recording=%q]')`, id), 30*time.Second)
		screenshot(t, admin, "recordings")
		run(t, admin, "open the recording", chromedp.Navigate(base+"/console/recordings/"+id), chromedp.WaitVisible("#player", css("#player")))
		// What the player rendered on its terminal, not the file.
		deadline := time.Now().Add(20 * time.Second)
		var shown string
		for time.Now().Before(deadline) {
			shown = eval[string](t, admin, `(document.querySelector('#player .ap-term') || {}).textContent || ''`)
			if consoleTick(shown) >= 0 {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if consoleTick(shown) < 0 {
			t.Fatalf("the player rendered no tick: %q\n(page: %q)", shown, text(t, admin, "main"))
		}
		if got := text(t, admin, "#exit-status"); got != "none" {
			t.Errorf("a killed exec's exit status shows %q, want none", got)
		}
		if got := text(t, admin, "#duration"); got == "" {
			t.Error("the recording page shows no duration")
		}
		screenshot(t, admin, "recording")
	})

	t.Run("search the audit trail for the session", func(t *testing.T) {
		run(t, admin, "search", chromedp.Navigate(base+"/console/audit"), chromedp.WaitVisible(`input[name="session"]`, css(`input[name="session"]`)),
			chromedp.SendKeys(`input[name="session"]`, id, css(`input[name="session"]`)),
			chromedp.Click(`form.filters button[type="submit"]`, css(`form.filters button[type="submit"]`)))
		waitJS(t, admin, "the audit search", fmt.Sprintf(`location.search.includes(%q) && !!document.getElementById('audit')`, id))
		table := text(t, admin, "#audit")
		for _, want := range []string{"session.start", "session.kill", "session.observe"} {
			if !strings.Contains(table, want) {
				t.Errorf("the audit search for %s lacks %s:\n%s", id, want, table)
			}
		}
		var events []audit.Event
		js := eval[string](t, admin, `fetch(document.getElementById('audit-json').href).then(r => r.text())`)
		if err := json.Unmarshal([]byte(js), &events); err != nil || len(events) == 0 {
			t.Fatalf("the JSON download: %v: %.300q", err, js)
		}
		for _, ev := range events {
			if ev.SessionID != id {
				t.Errorf("the JSON download holds an event of session %q", ev.SessionID)
			}
		}
		screenshot(t, admin, "audit")
	})

	t.Run("lock a user from the UI; their next kubectl request is refused", func(t *testing.T) {
		t.Cleanup(func() { _, _ = e.Limen(context.Background(), "admin", "", "unlock", "alice") })
		run(t, admin, "lock alice", chromedp.Navigate(base+"/console/locks"), chromedp.WaitVisible("#lock-name", css("#lock-name")),
			chromedp.SendKeys("#lock-name", "alice", css("#lock-name")),
			chromedp.SendKeys("#lock-reason", "console incident 16", css("#lock-reason")),
			chromedp.SendKeys("#lock-ttl", "10m", css("#lock-ttl")),
			chromedp.Submit("#lock-form", css("#lock-form")),
			chromedp.WaitVisible(`tr[data-target="user:alice"]`, css(`tr[data-target="user:alice"]`)))
		screenshot(t, admin, "locks")
		_, stderr, code := kubectl(t, kc, "", "-n", ns, "get", "pods")
		if code == 0 || !strings.Contains(stderr, "console incident 16") {
			t.Fatalf("locked alice: exit %d, stderr %q; want a refusal naming the reason", code, stderr)
		}
		run(t, admin, "unlock alice", chromedp.Click(`button[aria-label="Unlock user alice"]`, css(`button[aria-label="Unlock user alice"]`)))
		waitJS(t, admin, "after Unlock", `(document.querySelector('.done') || {}).textContent === 'Unlocked user alice.'`)
		if _, stderr, code := kubectl(t, kc, "", "-n", ns, "get", "pods"); code != 0 {
			t.Fatalf("unlocked alice: exit %d, stderr %q", code, stderr)
		}
	})

	t.Run("a POST without a CSRF token is refused", func(t *testing.T) {
		run(t, admin, "open Locks", chromedp.Navigate(base+"/console/locks"), chromedp.WaitVisible("#lock-form", css("#lock-form")))
		status := eval[float64](t, admin, `fetch('/console/locks', {method: 'POST',
			headers: {'Content-Type': 'application/x-www-form-urlencoded'},
			body: 'kind=user&name=bob&reason=forged&ttl=10m'}).then(r => r.status)`)
		if status != 403 {
			t.Fatalf("a lock POST without a CSRF token: status %v, want 403", status)
		}
		withToken := eval[float64](t, admin, `fetch('/console/locks', {method: 'POST',
			headers: {'Content-Type': 'application/x-www-form-urlencoded'},
			body: 'kind=user&name=bob&reason=forged&ttl=10m&csrf=0123456789abcdef'}).then(r => r.status)`)
		if withToken != 403 {
			t.Fatalf("a lock POST with a wrong CSRF token: status %v, want 403", withToken)
		}
		if strings.Contains(adminOn(t, e, "locks", "ls"), "bob") {
			t.Fatal("a refused POST locked bob")
		}
	})

	t.Run("policy status and what may I do", func(t *testing.T) {
		run(t, admin, "open Policy", chromedp.Navigate(base+"/console/policy"), chromedp.WaitVisible("#policy", css("#policy")))
		table := text(t, admin, "#policy")
		if !strings.Contains(table, "proxy") || !strings.Contains(table, "worker") || !strings.Contains(table, "embedded") {
			t.Errorf("the policy page lacks the proxy's or the worker's status:\n%s", table)
		}
		screenshot(t, admin, "policy")
		// The real computation: the admin's rules through kubectl, from a
		// SelfSubjectRulesReview through the worker, and the console's own
		// empty scope, which exposes nothing.
		run(t, admin, "open What may I do", chromedp.Navigate(base+"/console/access?cluster=demo&namespace="+ns),
			chromedp.WaitVisible("#access", css("#access")))
		if got := text(t, admin, "#access"); !strings.Contains(got, "allowed") || strings.Contains(got, "out of scope") {
			t.Errorf("what may I do through kubectl (unscoped) for the admin:\n%s", got)
		}
		screenshot(t, admin, "access")
		run(t, admin, "ask through the console client", chromedp.Navigate(base+"/console/access?cluster=demo&client=console&namespace="+ns),
			chromedp.WaitVisible("main", css("main")))
		if got := text(t, admin, "main"); strings.Contains(got, "allowed") {
			t.Errorf("what may I do through the console client, whose scope is empty, has an allowed answer:\n%s", got)
		}
	})

	t.Run("a non-admin cannot see another user's recording", func(t *testing.T) {
		bob := consoleBrowser(t)
		signIn(t, bob, base, "bob", password("bob"))
		run(t, bob, "open Recordings", chromedp.Navigate(base+"/console/recordings"), chromedp.WaitVisible("#recordings", css("#recordings")))
		if eval[bool](t, bob, fmt.Sprintf(`!!document.querySelector('tr[data-recording=%q]')`, id)) {
			t.Error("bob's Recordings page lists alice's recording")
		}
		screenshot(t, bob, "recordings-bob")
		list := eval[string](t, bob, `fetch('/console/api/recordings').then(r => r.text())`)
		if strings.Contains(list, id) {
			t.Errorf("the JSON behind bob's Recordings page holds alice's recording: %s", list)
		}
		if st := eval[float64](t, bob, fmt.Sprintf(`fetch('/console/api/recordings/%s').then(r => r.status)`, id)); st != 404 {
			t.Errorf("bob fetching alice's recording: status %v, want 404", st)
		}
		run(t, bob, "open alice's recording", chromedp.Navigate(base+"/console/recordings/"+id), chromedp.WaitReady("main", css("main")))
		if got := text(t, bob, "main"); strings.Contains(got, "console-tick") || !strings.Contains(got, "no recording") {
			t.Errorf("bob's page for alice's recording says %q", got)
		}
		// Nor the admin pages.
		if st := eval[float64](t, bob, `fetch('/console/api/audit').then(r => r.status)`); st != 403 {
			t.Errorf("bob's audit search: status %v, want 403", st)
		}
	})
	t.Logf("screenshots in %s", consoleShots(t))
}

// waitAudit waits until the proxy's audit store holds an event of type
// typ that match accepts.
func waitAudit(t *testing.T, typ audit.Type, match func(audit.Event) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := audit.Open(context.Background(), audit.Path(proxyDataDir(t)), audit.Options{ReadOnly: true})
		if err != nil {
			t.Fatalf("open audit store: %v", err)
		}
		evs, err := st.Search(context.Background(), audit.Query{Type: typ})
		st.Close()
		if err != nil {
			t.Fatalf("audit search: %v", err)
		}
		for _, ev := range evs {
			if match(ev) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no matching %s event stored within 10s", typ)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
