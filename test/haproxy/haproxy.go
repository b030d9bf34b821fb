// Package haproxy runs Debian's HAProxy (/usr/sbin/haproxy, package
// haproxy) for tests, in TCP mode on a loopback port in front of several
// limen proxies: TLS, client certificates and the server name pass through
// untouched, as with a cloud's network load balancer.
//
// Each backend is health-checked on its /readyz over TLS (ALPN http/1.1:
// the proxy's port limits a connection without ALPN to /k8s/ and
// /console/), fast enough for a test to watch a proxy leave and come
// back. A connection that cannot reach a proxy is retried on another
// (retries, option redispatch).
//
// Without the binary a test is skipped with a message saying what to
// install, except in CI (CI=true), where a missing binary fails it.
package haproxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/template"
	"time"
)

// Check timings: a proxy that fails two checks 500 ms apart is taken out
// of rotation; one good check puts it back.
const (
	CheckInterval = 500 * time.Millisecond
	CheckFall     = 2
	CheckRise     = 1
)

// Backend is one proxy behind the balancer.
type Backend struct {
	// Name is the server's name in HAProxy's configuration and statistics.
	Name string
	// Addr is the proxy's HOST:PORT.
	Addr string
}

// LB is one running HAProxy.
type LB struct {
	// Addr is the balancer's HOST:PORT on 127.0.0.1.
	Addr string
	// Dir holds the configuration, the statistics socket and the log.
	Dir      string
	backends []Backend
	source   string // SendProxyFrom's address; "" sends no header
	cmd      *exec.Cmd
	exited   chan struct{}
}

// Binary returns HAProxy's path, or "" when it is not installed.
func Binary() string {
	if p, err := exec.LookPath("haproxy"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/haproxy"); err == nil {
		return "/usr/sbin/haproxy"
	}
	return ""
}

// Need skips tb when HAProxy is missing, or fails it in CI.
func Need(tb testing.TB) string {
	tb.Helper()
	bin := Binary()
	if bin == "" {
		if os.Getenv("CI") == "true" {
			tb.Fatal("haproxy not found (PATH or /usr/sbin/haproxy): CI must install Debian's haproxy package (.ci/run)")
		}
		tb.Skip("haproxy not found: install Debian's haproxy package to run the load-balancer tests")
	}
	return bin
}

// config is HAProxy's configuration. Notes on the choices:
//
//   - mode tcp: the balancer never terminates TLS, so the proxy sees the
//     client's certificate and server name itself.
//   - balance leastconn: long-lived connections (client-go's one HTTP/2
//     connection, exec, watch) spread evenly over the proxies.
//   - check-ssl verify none + check-alpn http/1.1: the checks speak
//     HTTP/1.1 over TLS to /readyz on the proxy's one port; the check
//     trusts nothing it is told but the status.
//   - retries + option redispatch 1: a connection refused by a proxy that
//     died or closed its listener (SIGTERM) is retried on another at once.
//   - no on-marked-down shutdown-sessions: a proxy that dies takes its
//     connections with it anyway, one that drains closes them itself, and
//     when every proxy reports not ready (the shared database is down) the
//     open connections should still be answered 503 by the proxies rather
//     than cut by the balancer.
//   - the backup lines are the same proxies without checks, used only
//     when every checked line is down: a new connection then still
//     reaches a proxy, which answers 503 with its reason, instead of being
//     closed by the balancer with no word.
var config = template.Must(template.New("haproxy.cfg").Parse(`global
    stats socket {{.Dir}}/admin.sock mode 600 level admin
    log stdout format raw local0 info

defaults
    mode tcp
    log global
    option tcplog
    option redispatch 1
    retries 3
    timeout connect 1s
    timeout client 10m
    timeout server 10m
    timeout check 1s

frontend limen
    bind 127.0.0.1:{{.Port}}
    default_backend proxies

backend proxies
    balance leastconn
{{- if .Source}}
    source {{.Source}}
{{- end}}
    option httpchk
    http-check send meth GET uri /readyz ver HTTP/1.1 hdr Host localhost
    http-check expect status 200
    default-server inter {{.Inter}} fall {{.Fall}} rise {{.Rise}}
{{- range .Backends}}
    server {{.Name}} {{.Addr}} check check-ssl verify none check-alpn http/1.1{{if $.Source}} send-proxy-v2 check-send-proxy{{end}}
{{- end}}
{{- range .Backends}}
    server {{.Name}}-backup {{.Addr}} backup{{if $.Source}} send-proxy-v2{{end}}
{{- end}}
`))

// Option changes how Start runs HAProxy.
type Option func(*LB)

// SendProxyFrom makes HAProxy connect to the backends from source (a
// loopback address such as 127.0.0.2) and send each connection's client
// in a PROXY protocol v2 header, health checks included (send-proxy-v2,
// check-send-proxy), as a production balancer in front of proxies started
// with --proxy-protocol-from source does. Connections that reach the
// proxies directly come from 127.0.0.1 and send no header.
func SendProxyFrom(source string) Option { return func(lb *LB) { lb.source = source } }

// Start runs HAProxy in front of backends, stopped when tb ends.
func Start(tb testing.TB, backends []Backend, opts ...Option) *LB {
	tb.Helper()
	bin := Need(tb)
	if len(backends) == 0 {
		tb.Fatal("haproxy: no backends")
	}
	dir, err := os.MkdirTemp("", "limen-haproxy-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	lb := &LB{Dir: dir, backends: backends}
	for _, o := range opts {
		o(lb)
	}
	// The port is chosen free just before HAProxy binds it; a lost race is
	// retried.
	for attempt := 0; ; attempt++ {
		err := lb.start(bin, freePort(tb))
		if err == nil {
			break
		}
		if attempt == 2 {
			tb.Fatalf("start haproxy: %v", err)
		}
	}
	tb.Cleanup(lb.Stop)
	return lb
}

func (lb *LB) start(bin string, port int) error {
	var cfg bytes.Buffer
	if err := config.Execute(&cfg, map[string]any{
		"Dir": lb.Dir, "Port": port, "Backends": lb.backends, "Source": lb.source,
		"Inter": CheckInterval.Milliseconds(), "Fall": CheckFall, "Rise": CheckRise,
	}); err != nil {
		return err
	}
	path := filepath.Join(lb.Dir, "haproxy.cfg")
	if err := os.WriteFile(path, cfg.Bytes(), 0o600); err != nil {
		return err
	}
	if out, err := exec.Command(bin, "-c", "-q", "-f", path).CombinedOutput(); err != nil {
		return fmt.Errorf("haproxy -c %s: %v\n%s", path, err, out)
	}
	logf, err := os.OpenFile(filepath.Join(lb.Dir, "haproxy.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	// -db: in the foreground, so that the test owns the process.
	cmd := exec.Command(bin, "-db", "-f", path)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(lb.Dir, "haproxy.log"))
			return fmt.Errorf("haproxy exited during start:\n%s", log)
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("haproxy did not listen on %s within 10s; see %s", addr, filepath.Join(lb.Dir, "haproxy.log"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	lb.Addr, lb.cmd, lb.exited = addr, cmd, exited
	return nil
}

// Stop ends HAProxy; it does nothing once stopped.
func (lb *LB) Stop() {
	if lb.cmd == nil {
		return
	}
	_ = lb.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-lb.exited:
	case <-time.After(5 * time.Second):
		_ = lb.cmd.Process.Kill()
		<-lb.exited
	}
	lb.cmd = nil
}

// Server is one backend's line of HAProxy's statistics.
type Server struct {
	Name string
	// Status is HAProxy's: UP, DOWN, "UP 1/2" (going down), MAINT, no check
	// (the backup lines).
	Status string
	// Sessions is the connections open through it now (scur); Total since
	// start (stot).
	Sessions, Total int
}

// Servers reads the statistics of every backend line, backups included.
func (lb *LB) Servers(ctx context.Context) ([]Server, error) {
	out, err := lb.command(ctx, "show stat")
	if err != nil {
		return nil, err
	}
	r := csv.NewReader(strings.NewReader(strings.TrimPrefix(out, "# ")))
	r.FieldsPerRecord = -1
	rows, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("haproxy show stat: %w", err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("haproxy show stat: no header")
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	var servers []Server
	for _, row := range rows[1:] {
		if len(row) <= col["status"] || row[col["pxname"]] != "proxies" || row[col["svname"]] == "BACKEND" {
			continue
		}
		cur, _ := strconv.Atoi(row[col["scur"]])
		tot, _ := strconv.Atoi(row[col["stot"]])
		servers = append(servers, Server{Name: row[col["svname"]], Status: row[col["status"]], Sessions: cur, Total: tot})
	}
	return servers, nil
}

// ServerOf returns the backend a client connection from local (the
// client's HOST:PORT) was sent to, or "" when HAProxy has no such
// connection.
func (lb *LB) ServerOf(ctx context.Context, local string) (string, error) {
	out, err := lb.command(ctx, "show sess")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if !slices.Contains(f, "src="+local) {
			continue
		}
		for _, kv := range f {
			if srv, ok := strings.CutPrefix(kv, "srv="); ok {
				return srv, nil
			}
		}
	}
	return "", nil
}

// Status returns the check status of the backend named name ("UP",
// "DOWN", …).
func (lb *LB) Status(ctx context.Context, name string) (string, error) {
	servers, err := lb.Servers(ctx)
	if err != nil {
		return "", err
	}
	for _, s := range servers {
		if s.Name == name {
			return s.Status, nil
		}
	}
	return "", fmt.Errorf("haproxy has no server %q", name)
}

// WaitStatus waits until the backend named name reports status (as a
// prefix: "UP" matches "UP 1/2" too), up to d.
func (lb *LB) WaitStatus(ctx context.Context, name, status string, d time.Duration) error {
	deadline := time.Now().Add(d)
	var last string
	for {
		st, err := lb.Status(ctx, name)
		if err == nil && strings.HasPrefix(st, status) {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = st
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("haproxy server %s is %s, not %s, after %s; see %s", name, last, status, d, filepath.Join(lb.Dir, "haproxy.log"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// command sends one command to HAProxy's statistics socket and returns
// the answer.
func (lb *LB) command(ctx context.Context, cmd string) (string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", filepath.Join(lb.Dir, "admin.sock"))
	if err != nil {
		return "", fmt.Errorf("haproxy stats socket: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, cmd+"\n"); err != nil {
		return "", err
	}
	var b strings.Builder
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		b.WriteString(sc.Text())
		b.WriteByte('\n')
	}
	return b.String(), sc.Err()
}

func freePort(tb testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
