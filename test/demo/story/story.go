// Package story is what `make demo` shows: Limen's main job, one command at
// a time, on a running proxy and worker (gatewaytest). Each step prints the
// command as its actor would type it, runs it, prints its output, and checks
// that it did what the story says; a step that does not is an error, so a
// story that no longer holds fails `make demo` and the e2e test that runs it
// (test/e2e/demo_test.go).
package story

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/limenhq/limen/gateway/recstore"
	"github.com/limenhq/limen/test/gatewaytest"
)

// App is the example application client of the embedded policy
// (bundles/example/data.json): a scope of pods and their logs only.
const App = "log-viewer"

// LockReason is the reason the story locks alice with.
const LockReason = "demo: incident 42, laptop reported stolen"

// Options say where the story runs.
type Options struct {
	// Kubectl is the kubectl binary.
	Kubectl string
	// AdminKubeconfig is the cluster administrator's own kubeconfig, used
	// directly (not through Limen) to set the scene.
	AdminKubeconfig string
	// Namespace is where the story's pod and config maps go; empty is
	// "default", and kubectl's commands then say no -n.
	Namespace string
	// Out receives the story.
	Out io.Writer
}

// Run tells the story on env.
func Run(ctx context.Context, env *gatewaytest.Env, o Options) error {
	s := &teller{env: env, o: o, homes: map[string]bool{}, kubeconfigs: map[string]string{}, shown: map[string]string{}}
	if s.o.Namespace == "" {
		s.o.Namespace = "default"
	}
	since := time.Now().Add(-time.Second).UTC().Format(time.RFC3339)
	for _, chapter := range []func(context.Context) error{
		s.scene, s.logins, s.everyday, s.noSpeakingForOneself, s.access, s.recorded,
		func(ctx context.Context) error { return s.lock(ctx) },
		func(ctx context.Context) error { return s.audit(ctx, since) },
	} {
		if err := chapter(ctx); err != nil {
			return err
		}
	}
	return nil
}

type teller struct {
	env         *gatewaytest.Env
	o           Options
	homes       map[string]bool   // actors whose LIMEN_HOME was shown
	kubeconfigs map[string]string // actor → kubeconfig kubectl uses
	shown       map[string]string // actor → the KUBECONFIG last exported
}

// Say starts a chapter.
func (s *teller) say(format string, args ...any) {
	fmt.Fprintf(s.o.Out, "\n==> "+format+"\n", args...)
}

// note is a line of explanation under a command.
func (s *teller) note(format string, args ...any) {
	fmt.Fprintf(s.o.Out, "    # "+format+"\n", args...)
}

// want is what a step must show: it succeeds (or fails, with fail) and its
// output holds every one of has.
type want struct {
	fail bool
	has  []string
}

func ok(has ...string) want      { return want{has: has} }
func refused(has ...string) want { return want{fail: true, has: has} }

// check compares a finished step with w.
func (w want) check(typed, out string, err error) error {
	if err != nil && !w.fail {
		return fmt.Errorf("%s: %v", typed, err)
	}
	if err == nil && w.fail {
		return fmt.Errorf("%s succeeded; the story says it is refused", typed)
	}
	for _, h := range w.has {
		if !strings.Contains(out, h) {
			return fmt.Errorf("%s: its output does not say %q", typed, h)
		}
	}
	return nil
}

// print shows a command and its output as the actor's terminal would.
func (s *teller) print(actor, typed, out string) {
	fmt.Fprintf(s.o.Out, "%s$ %s\n", actor, typed)
	if out = strings.TrimRight(out, "\n"); out != "" {
		fmt.Fprintln(s.o.Out, "  "+strings.ReplaceAll(out, "\n", "\n  "))
	}
}

// run runs bin with args and env, and returns its output, stdout then
// stderr as a terminal interleaves them closely enough for short commands.
func run(ctx context.Context, stdin string, env []string, bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// limen runs a limen command as actor (a demo user, or "" for the proxy
// host's operator), showing it as typed.
func (s *teller) limen(ctx context.Context, actor, stdin string, w want, args ...string) (string, error) {
	var env []string
	if actor != "" {
		home := s.env.Home(actor)
		env = append(env, "LIMEN_HOME="+home)
		if !s.homes[actor] {
			s.homes[actor] = true
			s.print(actor, "export LIMEN_HOME="+home, "")
		}
	}
	typed := "limen " + strings.Join(quoteAll(args), " ")
	if stdin != "" {
		typed += " <<< " + quote(strings.TrimSuffix(stdin, "\n"))
	}
	out, err := run(ctx, stdin, env, s.env.Bin, args...)
	s.print(prompt(actor), typed, out)
	return out, w.check(typed, out, err)
}

// kubectl runs kubectl as actor with the kubeconfig Limen wrote for them,
// showing it as typed.
func (s *teller) kubectl(ctx context.Context, actor string, w want, args ...string) (string, error) {
	kc := s.kubeconfigs[actor]
	if s.shown[actor] != kc {
		s.shown[actor] = kc
		s.print(actor, "export KUBECONFIG="+kc, "")
	}
	args = s.inNamespace(args)
	typed := "kubectl " + strings.Join(quoteAll(args), " ")
	out, err := run(ctx, "", []string{"KUBECONFIG=" + kc}, s.o.Kubectl, args...)
	s.print(actor, typed, out)
	return out, w.check(typed, out, err)
}

// inNamespace puts -n NAMESPACE first when the story is not in default.
func (s *teller) inNamespace(args []string) []string {
	if s.o.Namespace == "default" {
		return args
	}
	return append([]string{"-n", s.o.Namespace}, args...)
}

func prompt(actor string) string {
	if actor == "" {
		return "proxy-host"
	}
	return actor
}

func quoteAll(args []string) []string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = quote(a)
	}
	return q
}

// quote quotes a word for a POSIX shell when it needs it.
func quote(a string) string {
	if a != "" && !strings.ContainsAny(a, " \t\n'\"$;&|<>()*?`\\!{}") {
		return a
	}
	return "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
}

// scene: the cluster's own administrator starts a pod, directly.
func (s *teller) scene(ctx context.Context) error {
	s.say("The cluster's own administrator, directly (not through Limen), starts a pod to work with")
	s.kubeconfigs["cluster-admin"] = s.o.AdminKubeconfig
	if _, err := s.kubectl(ctx, "cluster-admin", ok("created"), "run", "hello", "--image=local", "--restart=Never",
		"--", "sh", "-c", "echo hello from a pod; sleep 3600"); err != nil {
		return err
	}
	_, err := s.kubectl(ctx, "cluster-admin", ok("condition met"), "wait", "--for=condition=Ready", "pod/hello", "--timeout=60s")
	return err
}

// logins: alice and bob get a short-lived certificate and a kubeconfig.
func (s *teller) logins(ctx context.Context) error {
	s.say("Alice (trait groups=dev) and Bob log in: a short-lived certificate, then a kubeconfig for cluster %q whose only credential is the limen plugin", gatewaytest.ClusterName)
	for _, u := range []string{"alice", "bob"} {
		if _, err := s.limen(ctx, u, password(u)+"\n", ok("Logged in"), "login", "--proxy", s.env.ProxyAddr,
			"--user", u, "--ca-fingerprint", s.env.Fingerprint, "--password-stdin"); err != nil {
			return err
		}
		out, err := s.limen(ctx, u, "", ok("export KUBECONFIG="), "kube", "login", gatewaytest.ClusterName)
		if err != nil {
			return err
		}
		s.kubeconfigs[u] = exported(out)
	}
	s.note("policy (OPA/Rego) turns each person's traits into Kubernetes groups; the worker impersonates them")
	if _, err := s.kubectl(ctx, "alice", ok("alice", "limen:edit"), "auth", "whoami"); err != nil {
		return err
	}
	_, err := s.kubectl(ctx, "bob", ok("bob", "limen:view"), "auth", "whoami")
	return err
}

// exported is the path of the export KUBECONFIG= line in out.
func exported(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(l), "export KUBECONFIG="); ok {
			return p
		}
	}
	return ""
}

func password(user string) string {
	for _, u := range gatewaytest.Users {
		if u.Name == user {
			return u.Password
		}
	}
	return ""
}

// everyday: kubectl unchanged; Kubernetes' RBAC decides on the groups.
func (s *teller) everyday(ctx context.Context) error {
	s.say("Everyday kubectl, unchanged, through Limen; Kubernetes' own RBAC decides on the groups Limen gave")
	steps := []struct {
		actor string
		w     want
		args  []string
	}{
		{"alice", ok("hello"), []string{"get", "pods"}},
		{"alice", ok("hello from a pod"), []string{"logs", "hello"}},
		{"alice", ok("created"), []string{"create", "configmap", "from-alice", "--from-literal=by=alice"}},
		{"bob", ok("from-alice"), []string{"get", "configmaps"}},
		{"bob", refused("forbidden", "cannot create"), []string{"create", "configmap", "from-bob", "--from-literal=by=bob"}},
	}
	for _, st := range steps {
		if _, err := s.kubectl(ctx, st.actor, st.w, st.args...); err != nil {
			return err
		}
	}
	s.note("bob's groups (limen:view) may read, not write: that refusal is Kubernetes', not Limen's")
	return nil
}

// noSpeakingForOneself: a client's impersonation headers are stripped.
func (s *teller) noSpeakingForOneself(ctx context.Context) error {
	s.say("No client speaks for itself: Limen strips kubectl's --as and --as-group")
	out, err := s.kubectl(ctx, "alice", ok("alice"), "auth", "whoami", "--as=admin", "--as-group=system:masters")
	if err != nil {
		return err
	}
	if strings.Contains(out, "system:masters") {
		return fmt.Errorf("kubectl auth whoami --as-group=system:masters through Limen says system:masters:\n%s", out)
	}
	s.note("still alice in her own groups: the Impersonate-* headers never reached the cluster")
	return nil
}

// access: what may I do, with the three answers.
func (s *teller) access(ctx context.Context) error {
	s.say("What may I do: limen kube access answers allowed (yes), refused by Kubernetes (rbac) or out of the client's Limen scope (scope)")
	ns := []string{}
	if s.o.Namespace != "default" {
		ns = []string{"-n", s.o.Namespace}
	}
	if _, err := s.limen(ctx, "bob", "", ok("configmaps", "yes", "rbac"), append([]string{"kube", "access", gatewaytest.ClusterName}, ns...)...); err != nil {
		return err
	}
	s.note("an application gets a credential of its own, and policy gives it a scope: %s may read pods and their logs, nothing else", App)
	out, err := s.limen(ctx, "alice", "", ok("export KUBECONFIG="), "kube", "login", gatewaytest.ClusterName, "--app", App)
	if err != nil {
		return err
	}
	cli := s.kubeconfigs["alice"]
	defer func() { s.kubeconfigs["alice"] = cli }()
	s.kubeconfigs["alice"] = exported(out)
	if _, err := s.limen(ctx, "alice", "", ok("client "+App, "scope", "yes"), append([]string{"kube", "access", gatewaytest.ClusterName, "--app", App}, ns...)...); err != nil {
		return err
	}
	if _, err := s.kubectl(ctx, "alice", ok("hello from a pod"), "logs", "hello"); err != nil {
		return err
	}
	if _, err := s.kubectl(ctx, "alice", refused("OutsideLimenScope"), "get", "configmaps"); err != nil {
		return err
	}
	s.note("alice's RBAC allows config maps; through %s they are out of scope, refused before Kubernetes is asked", App)
	return nil
}

// recorded: an exec through Limen, then its recording played back.
func (s *teller) recorded(ctx context.Context) error {
	s.say("An exec is recorded (asciicast v3), stored by the proxy, and played back")
	if _, err := s.kubectl(ctx, "alice", ok("checking the pod", "done"), "exec", "hello", "--",
		"sh", "-c", "echo checking the pod; echo uptime: up for a demo; echo done"); err != nil {
		return err
	}
	id, err := s.lastSession(ctx, "exec", "checking the pod")
	if err != nil {
		return err
	}
	if err := s.waitStored(ctx, id); err != nil {
		return err
	}
	s.note("on the proxy host (or anywhere with --recording-store and its credentials):")
	_, err = s.limen(ctx, "", "", ok("checking the pod", "done"), "play", id, "--data-dir", s.env.ProxyDataDir(), "--speed", "4")
	return err
}

// lastSession is the id of alice's last session of kind whose command
// says marker, from the audit trail (as an operator finds it: limen audit
// search --type session.end).
func (s *teller) lastSession(ctx context.Context, kind, marker string) (string, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := run(ctx, "", nil, s.env.Bin, "audit", "search", "--data-dir", s.env.ProxyDataDir(),
			"--type", "session.end", "--user", "alice", "--since", "5m", "--json")
		if err == nil {
			id := ""
			sc := bufio.NewScanner(strings.NewReader(out))
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				if strings.Contains(sc.Text(), `"login":"`+kind+`"`) && strings.Contains(sc.Text(), marker) {
					id = field(sc.Text(), "session_id")
				}
			}
			if id != "" {
				return id, nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no session.end of alice's %s in the audit trail within 30s: %v\n%s", kind, err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// field is the string value of key in a JSON line, good enough for the
// flat ids the audit trail writes.
func field(line, key string) string {
	_, rest, ok := strings.Cut(line, `"`+key+`":"`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// waitStored waits until the worker's upload of recording id is in the
// proxy's store.
func (s *teller) waitStored(ctx context.Context, id string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := recstore.OpenExisting(recstore.Path(s.env.ProxyDataDir()))
		if err == nil {
			_, err = st.Find(id)
			st.Close()
			if err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the recording of session %s did not reach the proxy's store within 60s: %v", id, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// lock: a running watch ends when alice is locked, with the reason.
func (s *teller) lock(ctx context.Context) error {
	s.say("A lock ends what is running: alice's kubectl get -w ends within a second, and her next request is refused with the reason")
	args := s.inNamespace([]string{"get", "configmaps", "-w"})
	cmd := exec.CommandContext(ctx, s.o.Kubectl, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+s.kubeconfigs["alice"])
	var mu sync.Mutex
	var watchOut bytes.Buffer
	w := lockedWriter{mu: &mu, b: &watchOut}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill() }()
	s.print("alice", "kubectl "+strings.Join(quoteAll(args), " ")+" &", "")
	if err := waitFor(ctx, &mu, &watchOut, "from-alice", 30*time.Second); err != nil {
		return fmt.Errorf("kubectl get -w through Limen: %w", err)
	}
	if _, err := s.waitLive(ctx, "watch"); err != nil {
		return err
	}
	// Unlock even when a step below fails: alice is a user of other tests too.
	defer func() {
		_, _ = run(context.Background(), "", []string{"LIMEN_HOME=" + s.env.Home("admin")}, s.env.Bin, "unlock", "alice")
	}()
	start := time.Now()
	if _, err := s.limen(ctx, "admin", "", ok(), "lock", "alice", "--reason", LockReason); err != nil {
		return err
	}
	var werr error
	select {
	case werr = <-done:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("alice's kubectl get -w still runs 10s after limen lock")
	}
	took := time.Since(start)
	mu.Lock()
	got := watchOut.String()
	mu.Unlock()
	exit := "exit 0"
	if werr != nil {
		exit = werr.Error()
	}
	s.note("alice's kubectl get -w, in the background, printed this and ended %s after the lock (%s):", took.Round(10*time.Millisecond), exit)
	fmt.Fprintln(s.o.Out, "  "+strings.ReplaceAll(strings.TrimRight(got, "\n"), "\n", "\n  "))
	if !strings.Contains(got, "from-alice") {
		return fmt.Errorf("kubectl get -w printed %q; the story says it lists from-alice before the lock ends it", got)
	}
	s.note("the stream was cut at both hops; alice's next request is refused with the lock's reason:")
	if _, err := s.kubectl(ctx, "alice", refused(LockReason), "get", "pods"); err != nil {
		return err
	}
	_, err := s.limen(ctx, "admin", "", ok(), "unlock", "alice")
	if err != nil {
		return err
	}
	_, err = s.kubectl(ctx, "alice", ok("hello"), "get", "pods")
	return err
}

// waitLive shows the admin's limen sessions ls once a live session of kind
// is in it.
func (s *teller) waitLive(ctx context.Context, kind string) (string, error) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, err := run(ctx, "", []string{"LIMEN_HOME=" + s.env.Home("admin")}, s.env.Bin, "sessions", "ls")
		if err == nil && liveOf(out, kind) {
			return s.limen(ctx, "admin", "", ok(kind), "sessions", "ls")
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no live %s session in limen sessions ls within 15s: %v\n%s", kind, err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// liveOf reports whether a limen sessions ls table lists a live session of
// kind for alice.
func liveOf(table, kind string) bool {
	for _, l := range strings.Split(table, "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && strings.Contains(l, " "+kind+" ") && strings.Contains(l, "alice") && strings.Contains(l, "live") {
			return true
		}
	}
	return false
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func waitFor(ctx context.Context, mu *sync.Mutex, b *bytes.Buffer, text string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		mu.Lock()
		has := strings.Contains(b.String(), text)
		got := b.String()
		mu.Unlock()
		if has {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%q not printed within %s; printed %q", text, d, got)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// audit: every step above, in the proxy's audit trail.
func (s *teller) audit(ctx context.Context, since string) error {
	s.say("The audit trail of all of it, on the proxy host: every request, session, refusal, lock and unlock")
	search := func(w want, args ...string) error {
		_, err := s.limen(ctx, "", "", w, append([]string{"audit", "search", "--data-dir", s.env.ProxyDataDir(), "--since", since}, args...)...)
		return err
	}
	if err := search(ok("session.end", "end=completed", "end=locked", "outside this client's Limen scope", LockReason), "--user", "alice"); err != nil {
		return err
	}
	s.note("bob's refused write: Kubernetes answered 403, and Limen audited it")
	if err := search(ok("403"), "--user", "bob", "--verb", "create"); err != nil {
		return err
	}
	return search(ok("user.lock", "user.unlock"), "--user", "admin")
}

// Console prints where the web console is and how to sign in.
func Console(out io.Writer, env *gatewaytest.Env, keep bool) {
	fmt.Fprintf(out, "\n==> The web console: sessions, live view, recordings, audit search, locks, policy status, what may I do\n")
	fmt.Fprintf(out, "  open https://%s/console/\n", env.ProxyAddr)
	fmt.Fprintf(out, "  its certificate is from the proxy's own CA (fingerprint %s): accept it in the browser\n", env.Fingerprint)
	for _, u := range gatewaytest.Users {
		if u.Name == "admin" {
			fmt.Fprintf(out, "  sign in as %s, password %s (an administrator: sees everyone's sessions and recordings)\n", u.Name, u.Password)
		}
	}
	fmt.Fprintf(out, "  or as alice, password %s, or bob, password %s (each sees only their own)\n", password("alice"), password("bob"))
	if !keep {
		fmt.Fprintf(out, "  the demo stops everything when it ends; to keep the console up: make demo DEMO_FLAGS=--keep\n")
	}
}
