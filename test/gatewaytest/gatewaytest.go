// Package gatewaytest runs Limen end to end on the test control plane: the
// real limen binary as proxy and worker, the worker bound by the manifests in
// deploy/kube with a real ServiceAccount token, and users logged in through
// limen login. The e2e tests and `make demo` share it.
package gatewaytest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/limenhq/limen/gateway/impersonate"
	"github.com/limenhq/limen/test/cluster/controlplane"
)

// ClusterName is the name Limen knows the test cluster by; the example
// policy grants on it.
const ClusterName = "demo"

// Users are the demo users and their passwords, created by Start; their
// traits give them different groups under the default policy.
var Users = []User{
	{Name: "admin", Password: "admin-password-1", Traits: []string{"groups=admins"}},
	{Name: "alice", Password: "alice-password-1", Traits: []string{"groups=dev"}},
	{Name: "bob", Password: "bob-password-1"},
}

// User is a local user of the proxy.
type User struct {
	Name, Password string
	Traits         []string
}

// Env is a running proxy and worker in front of a control plane.
type Env struct {
	Cluster     *controlplane.Cluster
	Dir         string
	Bin         string // the limen binary
	ProxyAddr   string
	Fingerprint string // the proxy CA's
	TokenFile   string // the worker's ServiceAccount token
	Log         io.Writer

	opts    Options
	root    string
	caDir   string // shared by the proxies, with DatabaseURL
	mu      sync.Mutex
	proxies []*proxyProc
	worker  *exec.Cmd
}

// proxyProc is one proxy process of an Env: its address, kept across
// restarts, and the running command.
type proxyProc struct {
	addr string
	cmd  *exec.Cmd
}

// Options are extra command-line arguments for the proxy and the worker,
// passed on every start (StartProxy, StartWorker), for example
// --debug-listen, and the worker's RBAC.
type Options struct {
	ProxyArgs, WorkerArgs []string
	// Bin is a limen binary to run instead of building one, for a second
	// Env in the same test binary (the build links for seconds).
	Bin string
	// RBAC is the worker RBAC of deploy/kube the workers run under:
	// impersonate.ModeLegacy (worker-rbac.yaml) or ModeConstrained
	// (worker-rbac-constrained.yaml); every worker is started with the
	// matching --kube-impersonation. Empty takes $LIMEN_E2E_RBAC, so
	// that the whole e2e suite can run under either; unset, legacy.
	RBAC impersonate.Mode
	// ServiceAccount is the worker's ServiceAccount in limen-system; empty
	// is the manifests' limen-worker. Another name gets the variant's
	// ClusterRoles through bindings of its own, so that a second Env's
	// worker holds exactly its variant's rights even when the first Env's
	// worker runs under the other.
	ServiceAccount string
	// DatabaseURL runs the proxies on this PostgreSQL database
	// (--database-url), sharing a CA directory made by limen proxy keys
	// init (docs/KEYS.md); each proxy announces its listen address as
	// --peer-address, so that the worker keeps a tunnel to every proxy.
	// Empty: SQLite in the proxy's data directory.
	DatabaseURL string
	// Proxies is how many proxies to run (0: one); more than one needs
	// DatabaseURL. Proxy 0 is ProxyAddr, the one users log in to and the
	// worker enrolls with; each has its own data directory and log
	// (proxy.log, proxy-1.log, …).
	Proxies int
}

// RBACEnv names the environment variable that picks the worker RBAC for
// every Env that does not set Options.RBAC: "legacy" or "constrained".
const RBACEnv = "LIMEN_E2E_RBAC"

// manifestServiceAccount is the worker's ServiceAccount in deploy/kube.
const manifestServiceAccount = "limen-worker"

// rbacFiles are the manifests of deploy/kube a variant applies: the group
// bindings and exactly one worker RBAC (both would add up to the legacy
// rights).
func rbacFiles(m impersonate.Mode) []string {
	if m == impersonate.ModeConstrained {
		return []string{"groups.yaml", "worker-rbac-constrained.yaml"}
	}
	return []string{"groups.yaml", "worker-rbac.yaml"}
}

// Start builds limen, applies deploy/kube, and starts the proxy and one
// worker. Progress lines go to log.
func Start(ctx context.Context, c *controlplane.Cluster, dir string, log io.Writer) (*Env, error) {
	return StartWith(ctx, c, dir, log, Options{})
}

// StartWith is Start with extra arguments for the proxy and worker.
func StartWith(ctx context.Context, c *controlplane.Cluster, dir string, log io.Writer, opts Options) (*Env, error) {
	if opts.RBAC == "" {
		m, err := impersonate.ParseMode(os.Getenv(RBACEnv))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", RBACEnv, err)
		}
		opts.RBAC = m
	}
	if opts.ServiceAccount == "" {
		opts.ServiceAccount = manifestServiceAccount
	}
	if opts.Proxies > 1 && opts.DatabaseURL == "" {
		return nil, fmt.Errorf("gatewaytest: %d proxies need Options.DatabaseURL, a store they share", opts.Proxies)
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	e := &Env{Cluster: c, Dir: dir, Log: log, opts: opts, root: root}
	for range max(opts.Proxies, 1) {
		e.proxies = append(e.proxies, &proxyProc{})
	}
	e.Bin = opts.Bin
	if e.Bin == "" {
		e.Bin = filepath.Join(dir, "limen")
		e.step("building limen")
		build := exec.CommandContext(ctx, "go", "build", "-o", e.Bin, "./cmd/limen")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build ./cmd/limen: %w\n%s", err, out)
		}
	}
	if err := e.applyRBAC(ctx); err != nil {
		return nil, err
	}
	if err := e.writeWorkerToken(ctx); err != nil {
		return nil, err
	}
	if opts.DatabaseURL != "" {
		e.caDir = filepath.Join(dir, "ca-shared")
		if _, err := e.Limen(ctx, "", "", "proxy", "keys", "init", "--ca-dir", e.caDir); err != nil {
			return nil, err
		}
	}
	for i := range e.proxies {
		if err := e.StartProxyN(ctx, i); err != nil {
			return nil, err
		}
	}
	for _, u := range Users {
		if err := e.AddUser(ctx, u); err != nil {
			return nil, err
		}
	}
	e.step("users added: admin (groups=admins), alice (groups=dev), bob")
	if _, err := e.Login(ctx, "admin"); err != nil {
		return nil, err
	}
	token, err := e.Limen(ctx, "admin", "", "tokens", "create", "--cluster", ClusterName, "--ttl", "10m")
	if err != nil {
		return nil, err
	}
	if err := e.StartWorker(ctx, strings.TrimSpace(token)); err != nil {
		return nil, err
	}
	// The worker learns the other proxies from proxy 0's announcement.
	for i := 1; i < len(e.proxies); i++ {
		if err := e.WaitTunnel(ctx, i, 1); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// AddUser adds a local user in the proxies' user store.
func (e *Env) AddUser(ctx context.Context, u User) error {
	args := []string{"users", "add", u.Name, "--local", "--data-dir", e.proxyDir(), "--password-stdin"}
	if e.opts.DatabaseURL != "" {
		args = append(args, "--database-url", e.opts.DatabaseURL)
	}
	for _, t := range u.Traits {
		args = append(args, "--trait", t)
	}
	_, err := e.Limen(ctx, "", u.Password+"\n", args...)
	return err
}

func (e *Env) step(format string, args ...any) {
	if e.Log != nil {
		fmt.Fprintf(e.Log, "limen-e2e: "+format+"\n", args...)
	}
}

func (e *Env) proxyDir() string  { return e.proxyDirN(0) }
func (e *Env) workerDir() string { return filepath.Join(e.Dir, "worker") }

// ProxyDataDir is the proxy's data directory (audit store, recordings).
func (e *Env) ProxyDataDir() string { return e.proxyDir() }

// WorkerDataDir is the worker's data directory (recording spool).
func (e *Env) WorkerDataDir() string { return e.workerDir() }

// Home is the LIMEN_HOME of a user's profile.
func (e *Env) Home(user string) string { return filepath.Join(e.Dir, "home-"+user) }

// RBAC is the worker RBAC variant this Env's worker runs under.
func (e *Env) RBAC() impersonate.Mode { return e.opts.RBAC }

// impersonationArgs tell every worker of e the RBAC its token holds.
func (e *Env) impersonationArgs() []string {
	return []string{"--kube-impersonation", string(e.opts.RBAC)}
}

// ServiceAccount is the worker's ServiceAccount in limen-system.
func (e *Env) ServiceAccount() string { return e.opts.ServiceAccount }

// applyRBAC applies the group bindings and the variant's worker RBAC from
// deploy/kube, as an operator would; for a ServiceAccount other than the
// manifests' own, the ServiceAccount and the bindings are renamed and
// nothing else changes.
func (e *Env) applyRBAC(ctx context.Context) error {
	files := rbacFiles(e.opts.RBAC)
	e.step("applying deploy/kube/{%s} for ServiceAccount limen-system/%s", strings.Join(files, ","), e.opts.ServiceAccount)
	var objs []map[string]any
	for _, f := range files {
		docs, err := manifests(filepath.Join(e.root, "deploy", "kube", f))
		if err != nil {
			return err
		}
		objs = append(objs, docs...)
	}
	if sa := e.opts.ServiceAccount; sa != manifestServiceAccount {
		for _, o := range objs {
			renameServiceAccount(o, manifestServiceAccount, sa)
		}
	}
	list, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": objs})
	if err != nil {
		return err
	}
	_, err = e.run(ctx, string(list), nil, controlplane.KubectlPath(e.Cluster), "--kubeconfig", e.Cluster.Kubeconfig, "apply", "-f", "-")
	return err
}

// manifests reads the YAML documents of a manifest file.
func manifests(path string) ([]map[string]any, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var objs []map[string]any
	dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		var o map[string]any
		if err := dec.Decode(&o); err == io.EOF {
			return objs, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if o != nil {
			objs = append(objs, o)
		}
	}
}

// renameServiceAccount makes a manifest object about ServiceAccount from
// about to: the ServiceAccount itself, and a binding's name and subjects
// (a binding named for from's variant gets to's name appended, so that it
// does not replace the binding of another Env's worker).
func renameServiceAccount(o map[string]any, from, to string) {
	meta, _ := o["metadata"].(map[string]any)
	switch o["kind"] {
	case "ServiceAccount":
		if meta["name"] == from {
			meta["name"] = to
		}
	case "ClusterRoleBinding", "RoleBinding":
		subjects, _ := o["subjects"].([]any)
		for _, s := range subjects {
			if s, ok := s.(map[string]any); ok && s["kind"] == "ServiceAccount" && s["name"] == from {
				s["name"] = to
				meta["name"] = fmt.Sprint(meta["name"], "-", to)
			}
		}
	}
}

// writeWorkerToken asks the API server for a ServiceAccount token of the
// worker (TokenRequest), as a projected volume would hold it.
func (e *Env) writeWorkerToken(ctx context.Context) error {
	exp := int64(3600)
	sa := e.opts.ServiceAccount
	tr, err := e.Cluster.Client.CoreV1().ServiceAccounts("limen-system").CreateToken(ctx, sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("TokenRequest for limen-system/%s: %w", sa, err)
	}
	e.TokenFile = filepath.Join(e.Dir, "worker-token")
	return os.WriteFile(e.TokenFile, []byte(tr.Status.Token), 0o600)
}

// proxyDirN is proxy i's data directory; proxyName its log's name.
func (e *Env) proxyDirN(i int) string { return filepath.Join(e.Dir, proxyName(i)) }

func proxyName(i int) string {
	if i == 0 {
		return "proxy"
	}
	return fmt.Sprintf("proxy-%d", i)
}

// ProxyAddrs are the addresses of the Env's proxies, proxy 0 first.
func (e *Env) ProxyAddrs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	addrs := make([]string, len(e.proxies))
	for i, p := range e.proxies {
		addrs[i] = p.addr
	}
	return addrs
}

// ProxyLog is the path of proxy i's log.
func (e *Env) ProxyLog(i int) string { return filepath.Join(e.Dir, proxyName(i)+".log") }

// StartProxy starts `limen proxy` (again, after StopProxy, on the same
// address and data directory).
func (e *Env) StartProxy(ctx context.Context) error { return e.StartProxyN(ctx, 0) }

// StartProxyN starts proxy i (again, after StopProxyN or KillProxyN, on
// the same address and data directory).
func (e *Env) StartProxyN(ctx context.Context, i int) error {
	p := e.proxies[i]
	listen := p.addr
	shared := e.opts.DatabaseURL != ""
	if listen == "" && shared {
		// Its peer address is its listen address: known before it starts.
		port, err := freePort()
		if err != nil {
			return err
		}
		listen = fmt.Sprintf("127.0.0.1:%d", port)
	}
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	cmd := exec.Command(e.Bin, "proxy", "--listen", listen, "--data-dir", e.proxyDirN(i),
		"--clusters", ClusterName, "--cluster-label", ClusterName+":env=dev")
	if shared {
		cmd.Args = append(cmd.Args, "--database-url", e.opts.DatabaseURL, "--ca-dir", e.caDir, "--peer-address", listen)
	}
	cmd.Args = append(cmd.Args, e.opts.ProxyArgs...)
	lines, err := e.spawn(cmd, proxyName(i))
	if err != nil {
		return err
	}
	var addr, fp string
	deadline := time.After(30 * time.Second)
	for addr == "" || fp == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				return fmt.Errorf("limen proxy exited during start; see %s", e.ProxyLog(i))
			}
			if a, ok := strings.CutPrefix(l, "Limen proxy listening on https://"); ok {
				addr = a
			}
			if f, ok := strings.CutPrefix(l, "CA fingerprint: "); ok {
				fp = f
			}
		case <-deadline:
			_ = cmd.Process.Kill()
			return fmt.Errorf("limen proxy did not start within 30s; see %s", e.ProxyLog(i))
		}
	}
	if e.Fingerprint != "" && fp != e.Fingerprint {
		_ = cmd.Process.Kill()
		return fmt.Errorf("%s has CA %s, the others %s: the proxies do not share their CA", proxyName(i), fp, e.Fingerprint)
	}
	e.mu.Lock()
	p.addr, p.cmd = addr, cmd
	if i == 0 {
		e.ProxyAddr = addr
	}
	e.Fingerprint = fp
	e.mu.Unlock()
	e.step("%s listening on %s (CA %s)", proxyName(i), addr, fp)
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// StartWorker starts `limen worker` for the test cluster and waits until the
// proxy lists it as connected. token is needed only on first start.
func (e *Env) StartWorker(ctx context.Context, token string) error {
	return e.startWorker(ctx, token, nil)
}

// RestartWorker stops the worker, waits until the proxy has dropped its
// tunnel, and starts it again with extra arguments after
// Options.WorkerArgs; without extra, as configured.
func (e *Env) RestartWorker(ctx context.Context, extra ...string) error {
	if e.WorkerPID() != 0 {
		before := e.proxyLogCount(proxyLogDisconnected)
		e.StopWorker()
		if err := e.waitProxyLog(ctx, proxyLogDisconnected, before+1); err != nil {
			return err
		}
	}
	return e.startWorker(ctx, "", extra)
}

func (e *Env) startWorker(ctx context.Context, token string, extra []string) error {
	args := []string{"worker", "--proxy", e.ProxyAddr, "--kube-cluster", ClusterName, "--data-dir", e.workerDir(),
		"--kube-api-server", e.Cluster.Server, "--kube-ca-file", e.Cluster.CAFile, "--kube-token-file", e.TokenFile,
		"--kube-cluster-label", "env=dev",
		// One worker per cluster here: no replacement to wait for when a
		// test stops it (the rolling update's e2e uses the chart's default).
		"--shutdown-handover", "0"}
	args = append(args, e.impersonationArgs()...)
	if token != "" {
		args = append(args, "--join-token", token)
	}
	args = append(append(args, e.opts.WorkerArgs...), extra...)
	cmd := exec.Command(e.Bin, args...)
	if _, err := e.spawn(cmd, "worker"); err != nil {
		return err
	}
	e.mu.Lock()
	e.worker = cmd
	e.mu.Unlock()
	return e.WaitWorker(ctx, true)
}

// WaitWorker waits until `limen kube ls` shows the worker (dis)connected.
func (e *Env) WaitWorker(ctx context.Context, connected bool) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		out, err := e.Limen(ctx, "admin", "", "kube", "ls")
		if err == nil && strings.Contains(out, ClusterName) && !strings.Contains(out, "not connected") == connected {
			e.step("worker for cluster %s connected=%v", ClusterName, connected)
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("worker connected=%v not reached within 30s; see %s", !connected, filepath.Join(e.Dir, "worker.log"))
}

// Login logs a demo user in and writes their kubeconfig for the test
// cluster, returning its path.
func (e *Env) Login(ctx context.Context, user string) (string, error) {
	u := User{Name: user}
	for _, d := range Users {
		if d.Name == user {
			u = d
		}
	}
	return e.LoginAt(ctx, u, e.ProxyAddr)
}

// LoginAt logs u in through the proxy (or load balancer) at addr and
// writes their kubeconfig for the test cluster, whose server is addr.
func (e *Env) LoginAt(ctx context.Context, u User, addr string) (string, error) {
	user := u.Name
	if _, err := e.Limen(ctx, user, u.Password+"\n", "login", "--proxy", addr, "--user", user,
		"--password-stdin", "--ca-fingerprint", e.Fingerprint); err != nil {
		return "", err
	}
	out, err := e.Limen(ctx, user, "", "kube", "login", ClusterName)
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(out, "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(l), "export KUBECONFIG="); ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("limen kube login printed no export line: %q", out)
}

// Limen runs one limen command as user (LIMEN_HOME per user; "" for none)
// and returns its standard output.
func (e *Env) Limen(ctx context.Context, user, stdin string, args ...string) (string, error) {
	var env []string
	if user != "" {
		env = append(env, "LIMEN_HOME="+e.Home(user))
	}
	return e.run(ctx, stdin, env, e.Bin, args...)
}

func (e *Env) run(ctx context.Context, stdin string, env []string, bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", filepath.Base(bin), strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// spawn starts a long-running limen process, its stderr in DIR/NAME.log,
// and returns its stdout lines.
func (e *Env) spawn(cmd *exec.Cmd, name string) (<-chan string, error) {
	logf, err := os.OpenFile(filepath.Join(e.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		defer logf.Close()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			fmt.Fprintln(logf, sc.Text())
			select {
			case lines <- sc.Text():
			default:
			}
		}
		_ = cmd.Wait()
	}()
	return lines, nil
}

// StopProxy ends the proxy process (proxy 0).
func (e *Env) StopProxy() { e.StopProxyN(0, stopGrace) }

// StopProxyN sends proxy i SIGTERM, as a rolling upgrade does, and waits
// up to grace for it to exit before killing it; it reports whether the
// proxy exited by itself.
func (e *Env) StopProxyN(i int, grace time.Duration) bool {
	e.mu.Lock()
	p := e.proxies[i]
	cmd := p.cmd
	p.cmd = nil
	e.mu.Unlock()
	return stopCmd(cmd, grace)
}

// KillProxyN kills proxy i at once (SIGKILL), as a crash would.
func (e *Env) KillProxyN(i int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p := e.proxies[i]; p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
		p.cmd = nil
	}
}

// Tunnels counts the worker tunnels proxy i has registered since the Env
// started, as its log says (restarts included).
func (e *Env) Tunnels(i int) int { return e.logCount(proxyName(i), proxyLogConnected) }

// WaitTunnel waits until proxy i has registered n worker tunnels (Tunnels).
func (e *Env) WaitTunnel(ctx context.Context, i, n int) error {
	return e.waitLog(ctx, proxyName(i), proxyLogConnected, n)
}

// StopWorker ends the worker process.
func (e *Env) StopWorker() { e.stop(&e.worker) }

// KillWorker kills the worker at once (SIGKILL), as a crash would.
func (e *Env) KillWorker() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.worker != nil && e.worker.Process != nil {
		_ = e.worker.Process.Kill()
		e.worker = nil
	}
}

// KillWorkerNoticed kills the worker like KillWorker and returns once the
// proxy has dropped its tunnel, as its log says.
func (e *Env) KillWorkerNoticed(ctx context.Context) error {
	before := e.proxyLogCount(proxyLogDisconnected)
	e.KillWorker()
	return e.waitProxyLog(ctx, proxyLogDisconnected, before+1)
}

// The proxy's log lines for a worker's tunnel being registered and dropped
// (gateway/tunnel).
const (
	proxyLogConnected    = "tunnel: worker connected"
	proxyLogDisconnected = "tunnel: worker disconnected"
)

func (e *Env) proxyLogCount(line string) int { return e.logCount(proxyName(0), line) }

func (e *Env) logCount(name, line string) int {
	b, _ := os.ReadFile(filepath.Join(e.Dir, name+".log"))
	return bytes.Count(b, []byte(line))
}

// waitProxyLog waits until proxy 0's log holds line at least n times.
func (e *Env) waitProxyLog(ctx context.Context, line string, n int) error {
	return e.waitLog(ctx, proxyName(0), line, n)
}

func (e *Env) waitLog(ctx context.Context, name, line string, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for e.logCount(name, line) < n {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not log %q %d times within 30s; see %s", name, line, n, filepath.Join(e.Dir, name+".log"))
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// stopGrace is how long StopProxy and StopWorker wait after SIGTERM.
const stopGrace = 5 * time.Second

func (e *Env) stop(p **exec.Cmd) {
	e.mu.Lock()
	cmd := *p
	*p = nil
	e.mu.Unlock()
	stopCmd(cmd, stopGrace)
}

// stopCmd sends cmd SIGTERM and kills it after grace; it reports whether
// the process exited by itself.
func stopCmd(cmd *exec.Cmd, grace time.Duration) bool {
	if cmd == nil || cmd.Process == nil {
		return true
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		for cmd.ProcessState == nil {
			if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		return false
	}
}

// ProxyPID returns the process id of the running proxy (proxy 0), or 0.
func (e *Env) ProxyPID() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c := e.proxies[0].cmd; c != nil && c.Process != nil {
		return c.Process.Pid
	}
	return 0
}

// WorkerPID returns the process id of the running worker, or 0.
func (e *Env) WorkerPID() int { return e.pid(&e.worker) }

func (e *Env) pid(p **exec.Cmd) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if *p == nil || (*p).Process == nil {
		return 0
	}
	return (*p).Process.Pid
}

// Stop ends the worker and every proxy.
func (e *Env) Stop() {
	e.StopWorker()
	for i := range e.proxies {
		e.StopProxyN(i, stopGrace)
	}
}

// RepoRoot is the directory of the Limen checkout the tests run from.
func RepoRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("cannot locate the repository")
	}
	root := filepath.Join(filepath.Dir(file), "..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return "", fmt.Errorf("repository root not found at %s: %w", root, err)
	}
	return root, nil
}

// StartExtraWorker enrolls and starts another worker for the same cluster,
// with its own data directory, and returns a func that kills it.
func (e *Env) StartExtraWorker(ctx context.Context, name string) (func(), error) {
	token, err := e.Limen(ctx, "admin", "", "tokens", "create", "--cluster", ClusterName, "--ttl", "10m")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(e.Bin, "worker", "--proxy", e.ProxyAddr, "--kube-cluster", ClusterName,
		"--data-dir", filepath.Join(e.Dir, name), "--join-token", strings.TrimSpace(token),
		"--kube-api-server", e.Cluster.Server, "--kube-ca-file", e.Cluster.CAFile, "--kube-token-file", e.TokenFile,
		"--kube-cluster-label", "env=dev")
	cmd.Args = append(cmd.Args, e.impersonationArgs()...)
	connected := e.proxyLogCount(proxyLogConnected)
	lines, err := e.spawn(cmd, name)
	if err != nil {
		return nil, err
	}
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return nil, fmt.Errorf("worker %s exited; see %s", name, filepath.Join(e.Dir, name+".log"))
			}
			if strings.HasPrefix(l, "Worker for cluster") { // enrolled; the tunnel follows
				if err := e.waitProxyLog(ctx, proxyLogConnected, connected+1); err != nil {
					_ = cmd.Process.Kill()
					return nil, fmt.Errorf("worker %s: %w", name, err)
				}
				return func() { _ = cmd.Process.Kill() }, nil
			}
		case <-deadline:
			_ = cmd.Process.Kill()
			return nil, fmt.Errorf("worker %s did not enroll within 30s", name)
		}
	}
}
