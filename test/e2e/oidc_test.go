package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/profile"
	"github.com/limenhq/limen/test/cluster/clustertest"
	"github.com/limenhq/limen/test/gatewaytest"
	"github.com/limenhq/limen/test/idp"
)

// oidcEnv is a proxy and worker whose proxy signs people in through a test
// IdP and trusts the same IdP as the CI issuer "ci" for keyless bots.
type oidcEnv struct {
	*gatewaytest.Env
	idp *idp.IdP
}

const (
	idpClient = "limen"
	chromium  = "/usr/bin/chromium"
)

func startOIDCEnv(t *testing.T, proxyArgs ...string) *oidcEnv {
	t.Helper()
	p, err := idp.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	secret := filepath.Join(t.TempDir(), "client-secret")
	if err := os.WriteFile(secret, []byte("e2e-client-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p.AddClient(idp.Client{ID: idpClient, Secret: "e2e-client-secret", Redirects: []string{"http://127.0.0.1:*/callback"}})
	// The test IdP mints CI tokens with GitHub's claims.
	e := extraGateway(t, "OIDC sign-in", gatewaytest.Options{ProxyArgs: append([]string{
		"--oidc-issuer", p.URL, "--oidc-client-id", idpClient, "--oidc-client-secret-file", secret,
		"--oidc-trait", "groups=groups", "--ci-issuer", "ci=" + p.URL, "--ci-issuer-kind", "ci=github", "--ci-audience", idpClient},
		proxyArgs...)})
	return &oidcEnv{Env: e, idp: p}
}

// limenProcess is a limen command running in the background (a login that
// waits for a browser), its standard error read line by line.
type limenProcess struct {
	cmd    *exec.Cmd
	lines  chan string
	stdout bytes.Buffer
	done   chan error
}

func (e *oidcEnv) startLimen(t *testing.T, home string, args ...string) *limenProcess {
	t.Helper()
	lp := &limenProcess{cmd: exec.Command(e.Bin, args...), lines: make(chan string, 64), done: make(chan error, 1)}
	lp.cmd.Env = append(os.Environ(), "LIMEN_HOME="+home)
	lp.cmd.Stdout = &lp.stdout
	stderr, err := lp.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lp.cmd.Process.Kill() })
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lp.lines <- sc.Text()
		}
		close(lp.lines)
		lp.done <- lp.cmd.Wait()
	}()
	return lp
}

// line waits for a standard-error line with prefix and returns the rest.
func (lp *limenProcess) line(t *testing.T, prefix string) string {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-lp.lines:
			if !ok {
				t.Fatalf("limen exited before printing %q: %v", prefix, <-lp.done)
			}
			if rest, found := strings.CutPrefix(strings.TrimSpace(l), prefix); found {
				return rest
			}
		case <-deadline:
			t.Fatalf("limen printed no %q within 30s", prefix)
		}
	}
}

// wait returns the command's error and standard output once it exits.
func (lp *limenProcess) wait(t *testing.T) (string, error) {
	t.Helper()
	go func() {
		for range lp.lines {
		}
	}()
	select {
	case err := <-lp.done:
		return lp.stdout.String(), err
	case <-time.After(60 * time.Second):
		t.Fatal("limen did not exit within 60s")
		return "", nil
	}
}

// browser starts one headless Chromium for the test's sign-ins (each
// sign-in opens a tab of its own: see tab). Starting it once keeps a loaded
// machine from timing out on several browser starts.
func browser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("the browser tests need Debian's chromium at %s (apt-get install chromium): %v", chromium, err)
	}
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]), chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.Headless, chromedp.WSURLReadTimeout(time.Minute))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	// Start the browser now, so that a failure to start is reported here.
	if err := chromedp.Do(ctx); err != nil {
		cancelCtx()
		cancelAlloc()
		t.Fatalf("start %s: %v", chromium, err)
	}
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	return ctx
}

// tab opens a new tab of the browser for one sign-in.
func tab(t *testing.T, browser context.Context) context.Context {
	t.Helper()
	ctx, cancelTab := chromedp.NewContext(browser)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancelTab() })
	return ctx
}

// signInWithBrowser opens url and signs in on the IdP's page; it returns
// the text of the element waitFor (the page the sign-in ends on).
func signInWithBrowser(t *testing.T, ctx context.Context, url, email, password, waitFor string) string {
	t.Helper()
	if err := chromedp.Do(ctx,
		chromedp.Navigate(url),
		chromedp.WaitVisible("#username"),
		chromedp.SendKeys("#username", email),
		chromedp.SendKeys("#password", password),
		chromedp.Click("#submit"),
		chromedp.WaitVisible("#"+waitFor),
	); err != nil {
		t.Fatalf("browser sign-in at %s as %s: %v", url, email, err)
	}
	text, err := chromedp.Run(ctx, chromedp.Text("#"+waitFor))
	if err != nil {
		t.Fatalf("read #%s after signing in as %s: %v", waitFor, email, err)
	}
	return text
}

func (e *oidcEnv) kubeLogin(t *testing.T, home string) string {
	t.Helper()
	cmd := exec.Command(e.Bin, "kube", "login", gatewaytest.ClusterName)
	cmd.Env = append(os.Environ(), "LIMEN_HOME="+home)
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("limen kube login: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(l), "export KUBECONFIG="); ok {
			return p
		}
	}
	t.Fatalf("limen kube login printed no export line: %q", b)
	return ""
}

func (e *oidcEnv) limenAs(t *testing.T, home string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(e.Bin, args...)
	cmd.Env = append(os.Environ(), "LIMEN_HOME="+home)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("limen %s: %w: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// canEdit checks that kubeconfig's identity creates a ConfigMap in ns
// through Limen (limen:edit).
func canEdit(t *testing.T, kc, ns, name string) {
	t.Helper()
	if out, stderr, code := kubectl(t, kc, "", "-n", ns, "create", "configmap", name); code != 0 {
		t.Fatalf("kubectl create configmap %s: exit %d: %s %s", name, code, out, stderr)
	}
}

// TestOIDCSignInAndBots signs people in through the test IdP (code flow in
// a headless browser, device flow), checks that IdP groups become traits
// that policy turns into limen:edit, that a user removed at the IdP cannot
// sign in, and logs a CI bot in by join secret and by CI ID token; each
// identity then runs kubectl through Limen.
func TestOIDCSignInAndBots(t *testing.T) {
	e := startOIDCEnv(t)
	ns := clustertest.Namespace(t)
	e.idp.AddUser(idp.User{Email: "carol@example.com", Password: "carol-password", Groups: []string{"dev", "e2e"}})
	e.idp.AddUser(idp.User{Email: "dave@example.com", Password: "dave-password", Groups: []string{"dev"}})
	e.idp.AddUser(idp.User{Email: "erin@example.com", Password: "erin-password", Groups: []string{"sales"}})
	loginArgs := []string{"login", "--proxy", e.ProxyAddr, "--ca-fingerprint", e.Fingerprint}
	chrome := browser(t)

	t.Run("code flow", func(t *testing.T) {
		home := filepath.Join(e.Dir, "home-carol")
		lp := e.startLimen(t, home, append(loginArgs, "--oidc", "--no-browser")...)
		url := lp.line(t, "http")
		if !strings.HasPrefix("http"+url, e.idp.URL+"/") || !strings.Contains(url, "code_challenge_method=S256") {
			t.Fatalf("sign-in URL %q: want the IdP's authorization endpoint with PKCE", "http"+url)
		}
		got := signInWithBrowser(t, tab(t, chrome), "http"+url, "carol@example.com", "carol-password", "limen-result")
		if !strings.Contains(got, "Signed in") {
			t.Fatalf("loopback page says %q", got)
		}
		out, err := lp.wait(t)
		if err != nil || !strings.Contains(out, "as user:oidc:carol@example.com") {
			t.Fatalf("limen login --oidc: %v: %q", err, out)
		}
		kc := e.kubeLogin(t, home)
		u := whoami(t, kc)
		if u.Username != "oidc:carol@example.com" || !slices.Contains(u.Groups, "limen:edit") {
			t.Fatalf("whoami %+v: want the provider's carol, oidc:carol@example.com, with limen:edit (IdP group dev)", u)
		}
		canEdit(t, kc, ns, "by-carol")
	})

	t.Run("no group, no edit", func(t *testing.T) {
		home := filepath.Join(e.Dir, "home-erin")
		lp := e.startLimen(t, home, append(loginArgs, "--oidc", "--no-browser")...)
		url := "http" + lp.line(t, "http")
		signInWithBrowser(t, tab(t, chrome), url, "erin@example.com", "erin-password", "limen-result")
		if _, err := lp.wait(t); err != nil {
			t.Fatal(err)
		}
		kc := e.kubeLogin(t, home)
		if _, stderr, code := kubectl(t, kc, "", "-n", ns, "create", "configmap", "by-erin"); code == 0 || !strings.Contains(stderr, "grants oidc:erin@example.com no group") {
			t.Fatalf("erin (IdP group sales only) created a configmap: exit %d: %s", code, stderr)
		}
	})

	t.Run("device flow", func(t *testing.T) {
		home := filepath.Join(e.Dir, "home-dave")
		lp := e.startLimen(t, home, append(loginArgs, "--oidc", "--device")...)
		lp.line(t, "To sign in, open")
		complete := lp.line(t, "or open ")
		signInWithBrowser(t, tab(t, chrome), complete, "dave@example.com", "dave-password", "done")
		out, err := lp.wait(t)
		if err != nil || !strings.Contains(out, "as user:oidc:dave@example.com") {
			t.Fatalf("limen login --oidc --device: %v: %q", err, out)
		}
		kc := e.kubeLogin(t, home)
		if u := whoami(t, kc); u.Username != "oidc:dave@example.com" || !slices.Contains(u.Groups, "limen:edit") {
			t.Fatalf("whoami %+v", u)
		}
		canEdit(t, kc, ns, "by-dave")
	})

	t.Run("removed at the IdP", func(t *testing.T) {
		e.idp.RemoveUser("carol@example.com")
		home := filepath.Join(e.Dir, "home-carol-again")
		lp := e.startLimen(t, home, append(loginArgs, "--oidc", "--no-browser", "--oidc-timeout", "5s")...)
		url := "http" + lp.line(t, "http")
		if got := signInWithBrowser(t, tab(t, chrome), url, "carol@example.com", "carol-password", "error"); !strings.Contains(got, "unknown user") {
			t.Fatalf("the IdP's page says %q", got)
		}
		if out, err := lp.wait(t); err == nil {
			t.Fatalf("a user removed at the IdP logged in: %q", out)
		}
	})

	admin := e.Home("admin")
	t.Run("bot by join secret", func(t *testing.T) {
		if _, err := e.limenAs(t, admin, "bots", "add", "ci-deployer", "--trait", "team=release"); err != nil {
			t.Fatal(err)
		}
		secret, err := e.limenAs(t, admin, "bots", "token", "ci-deployer", "--ttl", "1h")
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(t.TempDir(), "join-secret")
		os.WriteFile(file, []byte(secret), 0o600)
		home := filepath.Join(e.Dir, "home-ci")
		// A short certificate, so that the plugin's renewal is exercised.
		if out, err := e.limenAs(t, home, append(loginArgs, "--bot", "ci-deployer", "--token-file", file, "--ttl", "3s")...); err != nil || !strings.Contains(out, "as bot:ci-deployer") {
			t.Fatalf("bot login: %v %q", err, out)
		}
		kc := e.kubeLogin(t, home)
		u := whoami(t, kc)
		if u.Username != "bot:ci-deployer" || !slices.Contains(u.Groups, "limen:edit") {
			t.Fatalf("whoami %+v: want bot:ci-deployer with limen:edit", u)
		}
		canEdit(t, kc, ns, "by-bot")
		first := certNotAfter(t, home, e.ProxyAddr)
		for time.Now().Before(first) {
			time.Sleep(100 * time.Millisecond)
		}
		// The certificate has expired: the plugin logs the bot in again.
		canEdit(t, kc, ns, "by-bot-renewed")
		if renewed := certNotAfter(t, home, e.ProxyAddr); !renewed.After(first) {
			t.Fatalf("the certificate was not renewed: %s, before %s", renewed, first)
		}
	})

	t.Run("user and bot of one name stay distinct", func(t *testing.T) {
		cmd := exec.Command(e.Bin, "users", "add", "ci-deployer", "--local", "--data-dir", e.ProxyDataDir(), "--password-stdin")
		cmd.Stdin = strings.NewReader("ci-deployer-password\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("users add: %v %s", err, out)
		}
		home := filepath.Join(e.Dir, "home-user-ci")
		login := exec.Command(e.Bin, append(loginArgs, "--user", "ci-deployer", "--password-stdin")...)
		login.Env = append(os.Environ(), "LIMEN_HOME="+home)
		login.Stdin = strings.NewReader("ci-deployer-password\n")
		if out, err := login.CombinedOutput(); err != nil || !strings.Contains(string(out), "as user:ci-deployer") {
			t.Fatalf("login user:ci-deployer: %v %s", err, out)
		}
		kc := e.kubeLogin(t, home)
		if _, stderr, code := kubectl(t, kc, "", "-n", ns, "get", "configmaps"); code == 0 || !strings.Contains(stderr, "grants ci-deployer no group") {
			t.Fatalf("user:ci-deployer, who has no binding (the bot has): exit %d: %s", code, stderr)
		}
	})

	t.Run("join secret uses", func(t *testing.T) {
		secret, err := e.limenAs(t, admin, "bots", "token", "ci-deployer", "--ttl", "1h", "--uses", "1")
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(t.TempDir(), "once")
		os.WriteFile(file, []byte(secret), 0o600)
		home := filepath.Join(e.Dir, "home-ci-once")
		args := append(loginArgs, "--bot", "ci-deployer", "--token-file", file)
		if _, err := e.limenAs(t, home, args...); err != nil {
			t.Fatal(err)
		}
		if _, err := e.limenAs(t, home, args...); err == nil || !strings.Contains(err.Error(), "used up") {
			t.Fatalf("a one-use secret logged in twice: %v", err)
		}
	})

	t.Run("bot by CI ID token", func(t *testing.T) {
		mint := func(ref string, extra ...any) string {
			claims := map[string]any{"repository_owner_id": "1000001", "repository": "limenhq/demo", "ref": ref}
			for i := 0; i+1 < len(extra); i += 2 {
				claims[extra[i].(string)] = extra[i+1]
			}
			tok, err := e.idp.WorkloadToken(idpClient, "repo:limenhq/demo:ref:"+ref, claims, 10*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(t.TempDir(), "id-token")
			os.WriteFile(file, []byte(tok), 0o600)
			return file
		}
		home := filepath.Join(e.Dir, "home-ci-keyless")
		out, err := e.limenAs(t, home, append(loginArgs, "--bot", "ci-deployer", "--id-token-file", mint("refs/heads/main"))...)
		if err != nil || !strings.Contains(out, "as bot:ci-deployer") {
			t.Fatalf("keyless bot login: %v %q", err, out)
		}
		kc := e.kubeLogin(t, home)
		if u := whoami(t, kc); u.Username != "bot:ci-deployer" || !slices.Contains(u.Groups, "limen:edit") {
			t.Fatalf("whoami %+v", u)
		}
		canEdit(t, kc, ns, "by-keyless-bot")
		// Another branch of the same repository does not match the bot's
		// rule in policy.
		if _, err := e.limenAs(t, filepath.Join(e.Dir, "home-ci-branch"), append(loginArgs, "--bot", "ci-deployer",
			"--id-token-file", mint("refs/heads/feature"))...); err == nil || !strings.Contains(err.Error(), "policy does not let") {
			t.Fatalf("a feature-branch token logged in as ci-deployer: %v", err)
		}
		// Another owner's repository of the same name does not either: the
		// entry pins repository_owner_id.
		if _, err := e.limenAs(t, filepath.Join(e.Dir, "home-ci-owner"), append(loginArgs, "--bot", "ci-deployer",
			"--id-token-file", mint("refs/heads/main", "repository_owner_id", "666"))...); err == nil || !strings.Contains(err.Error(), "policy does not let") {
			t.Fatalf("another owner's token logged in as ci-deployer: %v", err)
		}
		// A token logs in once: a copy of the one that did is refused.
		replayed := mint("refs/heads/main")
		if _, err := e.limenAs(t, filepath.Join(e.Dir, "home-ci-once-a"), append(loginArgs, "--bot", "ci-deployer", "--id-token-file", replayed)...); err != nil {
			t.Fatal(err)
		}
		if _, err := e.limenAs(t, filepath.Join(e.Dir, "home-ci-once-b"), append(loginArgs, "--bot", "ci-deployer",
			"--id-token-file", replayed)...); err == nil || !strings.Contains(err.Error(), "used before") {
			t.Fatalf("a CI token logged in twice: %v", err)
		}
		// The client rules apply to CI tokens too: two audiences without azp.
		if _, err := e.limenAs(t, filepath.Join(e.Dir, "home-ci-aud"), append(loginArgs, "--bot", "ci-deployer",
			"--id-token-file", mint("refs/heads/main", "aud", []any{idpClient, "other"}))...); err == nil || !strings.Contains(err.Error(), "rule aud") {
			t.Fatalf("a token with two audiences and no azp: %v", err)
		}
		// A lock on the bot refuses it; the user of the same name is not
		// locked with it.
		if _, err := e.limenAs(t, admin, "lock", "bot:ci-deployer", "--reason", "e2e bot lock"); err != nil {
			t.Fatal(err)
		}
		eventually(t, func() string {
			if _, stderr, code := kubectl(t, kc, "", "-n", ns, "get", "configmaps"); code == 0 || !strings.Contains(stderr, "e2e bot lock") {
				return fmt.Sprintf("locked bot:ci-deployer: exit %d, stderr %q; want a refusal naming the lock", code, stderr)
			}
			return ""
		})
		if _, err := e.limenAs(t, admin, "unlock", "bot:ci-deployer"); err != nil {
			t.Fatal(err)
		}
		eventually(t, func() string {
			if _, stderr, code := kubectl(t, kc, "", "-n", ns, "get", "configmaps"); code != 0 {
				return fmt.Sprintf("unlocked bot: exit %d: %s", code, stderr)
			}
			return ""
		})
	})

	t.Run("removed bot", func(t *testing.T) {
		if _, err := e.limenAs(t, admin, "bots", "rm", "ci-deployer"); err != nil {
			t.Fatal(err)
		}
		// The join-secret bot's certificate expires within seconds; its
		// plugin can no longer renew it.
		home := filepath.Join(e.Dir, "home-ci")
		for time.Now().Before(certNotAfter(t, home, e.ProxyAddr)) {
			time.Sleep(100 * time.Millisecond)
		}
		kc := e.kubeLoginPath(t, home)
		if _, stderr, code := kubectl(t, kc, "", "-n", ns, "get", "configmaps"); code == 0 || !strings.Contains(stderr, "renew bot ci-deployer") {
			t.Fatalf("a removed bot's plugin: exit %d: %s", code, stderr)
		}
	})
}

func profileDir(t *testing.T, home, proxy string) string {
	t.Helper()
	p, err := profile.Open(home, proxy)
	if err != nil {
		t.Fatal(err)
	}
	return p.Dir
}

func (e *oidcEnv) kubeLoginPath(t *testing.T, home string) string {
	t.Helper()
	p, err := profile.Open(home, e.ProxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	return p.KubeconfigPath(gatewaytest.ClusterName)
}

// certNotAfter is the expiry of the certificate stored in home.
func certNotAfter(t *testing.T, home, proxy string) time.Time {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(profileDir(t, home, proxy), profile.FileCert))
	if err != nil {
		t.Fatal(err)
	}
	certs, err := ca.ParseCertsPEM(data)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0].NotAfter
}
