// Package postgres starts a real PostgreSQL server for tests, from the
// Debian binaries (/usr/lib/postgresql/*/bin, package postgresql): initdb
// into a temporary directory, its own port on 127.0.0.1 and its socket in
// that directory, stopped when the test ends. PostgreSQL refuses to run as
// root, so under root the server runs as the system user postgres (or
// nobody).
//
// Without the binaries a test is skipped with a message saying what to
// install, except in CI (CI=true), where the PostgreSQL tests must run and
// a missing binary fails them.
package postgres

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// User and Password are the superuser the harness creates. Password
// authentication is required over TCP (scram-sha-256), so a test that
// leaves the password out of the URL sees the server refuse it.
const (
	User     = "limen"
	Password = "limen-test-password"
)

// Server is one running PostgreSQL.
type Server struct {
	// Dir is the temporary directory holding the data directory, the
	// socket and the log.
	Dir string
	// Port is the TCP port on 127.0.0.1.
	Port int
	bin  string
	as   string // the user the server runs as; "" when not root
	dbs  atomic.Int64
	tb   testing.TB
}

// Binaries returns the directory of the newest PostgreSQL server binaries
// installed, or "" when there are none.
func Binaries() string {
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(found, func(i, j int) bool { return version(found[i]) > version(found[j]) })
	if p, err := exec.LookPath("initdb"); err == nil {
		// A symbolic link in PATH stands for the directory it points into.
		if r, err := filepath.EvalSymlinks(p); err == nil {
			found = append(found, r)
		}
	}
	for _, f := range found {
		dir := filepath.Dir(f)
		if ok(dir, "pg_ctl") && ok(dir, "psql") {
			return dir
		}
	}
	return ""
}

func ok(dir, name string) bool {
	_, err := os.Stat(filepath.Join(dir, name))
	return err == nil
}

func version(initdb string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return n
}

// Start initialises and starts a server for tb, stopped (and its
// directory removed) when tb ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	bin := Binaries()
	if bin == "" {
		if os.Getenv("CI") == "true" {
			tb.Fatal("PostgreSQL server binaries not found (initdb in PATH or /usr/lib/postgresql/*/bin): CI must install the postgresql package (.ci/run)")
		}
		tb.Skip("PostgreSQL server binaries not found (initdb): install Debian's postgresql package to run the PostgreSQL tests")
	}
	s := &Server{bin: bin, tb: tb}
	if os.Geteuid() == 0 {
		for _, name := range []string{"postgres", "nobody"} {
			if _, err := user.Lookup(name); err == nil {
				s.as = name
				break
			}
		}
		if s.as == "" {
			tb.Fatal("running as root and neither user postgres nor nobody exists: PostgreSQL refuses to run as root")
		}
	}
	dir, err := os.MkdirTemp("", "limen-pg-")
	if err != nil {
		tb.Fatal(err)
	}
	s.Dir = dir
	tb.Cleanup(func() { os.RemoveAll(dir) })
	pw := filepath.Join(dir, "pwfile")
	if err := os.WriteFile(pw, []byte(Password+"\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	s.chown(dir, pw)
	if out, err := s.run("initdb", "-D", s.data(), "-U", User, "--pwfile", pw, "--auth-local=trust",
		"--auth-host=scram-sha-256", "-E", "UTF8", "--no-locale", "--no-sync"); err != nil {
		tb.Fatalf("initdb: %v\n%s", err, out)
	}
	// The port is chosen free just before the server binds it; a lost race
	// is retried.
	for attempt := 0; ; attempt++ {
		s.Port = freePort(tb)
		err := s.Start()
		if err == nil {
			break
		}
		if attempt == 2 {
			tb.Fatalf("start PostgreSQL: %v", err)
		}
	}
	tb.Cleanup(func() { s.Stop() })
	return s
}

func (s *Server) data() string { return filepath.Join(s.Dir, "data") }

func (s *Server) chown(paths ...string) {
	if s.as == "" {
		return
	}
	u, err := user.Lookup(s.as)
	if err != nil {
		s.tb.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for _, p := range paths {
		if err := os.Chown(p, uid, gid); err != nil {
			s.tb.Fatal(err)
		}
	}
}

// run runs one of the server's binaries, as the server's user.
func (s *Server) run(name string, args ...string) ([]byte, error) {
	path := filepath.Join(s.bin, name)
	var cmd *exec.Cmd
	if s.as != "" {
		cmd = exec.Command("runuser", append([]string{"-u", s.as, "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	cmd.Dir = s.Dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// Start starts the server (again, after Stop), on the same port, and
// waits until it accepts connections.
func (s *Server) Start() error {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=on", s.Port, s.Dir)
	if out, err := s.run("pg_ctl", "-D", s.data(), "-l", filepath.Join(s.Dir, "log"), "-o", opts, "-w", "-t", "60", "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.Dir, "log"))
		return fmt.Errorf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	return nil
}

// Stop stops the server (fast shutdown: sessions are ended, committed
// transactions stay); it does nothing when the server is not running.
func (s *Server) Stop() {
	if _, err := os.Stat(filepath.Join(s.data(), "postmaster.pid")); err != nil {
		return
	}
	if out, err := s.run("pg_ctl", "-D", s.data(), "-m", "fast", "-w", "stop"); err != nil {
		s.tb.Logf("pg_ctl stop: %v\n%s", err, out)
	}
}

// URL is the URL of database db for the superuser, password included.
func (s *Server) URL(db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(User, Password),
		Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)), Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

// Database creates an empty database of its own for tb and returns its URL.
func (s *Server) Database(tb testing.TB) string {
	tb.Helper()
	name := fmt.Sprintf("t%d_%d", os.Getpid(), s.dbs.Add(1))
	s.SQL(tb, "postgres", "CREATE DATABASE "+name)
	return s.URL(name)
}

// SQL runs statements in database db with psql over the socket, and
// returns what psql printed (unaligned, tuples only).
func (s *Server) SQL(tb testing.TB, db, stmts string) string {
	tb.Helper()
	out, err := s.run("psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", s.Dir, "-p", strconv.Itoa(s.Port),
		"-U", User, "-d", db, "-c", stmts)
	if err != nil {
		tb.Fatalf("psql %q: %v\n%s", stmts, err, out)
	}
	return strings.TrimSpace(string(out))
}

// WaitReady waits until the server accepts TCP connections, up to d.
func (s *Server) WaitReady(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)))
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freePort(tb testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
