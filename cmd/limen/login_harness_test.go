package main

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/profile"
)

// limenBin is the binary the CLI tests run; TestMain builds it.
var limenBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "limen-cli-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	limenBin = filepath.Join(dir, "limen")
	build := exec.Command("go", "build", "-o", limenBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build limen for the CLI tests:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// harness is a running `limen proxy` with an admin user, and a LIMEN_HOME
// for the CLI under test.
type harness struct {
	t     *testing.T
	home  string
	data  string
	proxy string
	fp    string
	// extra is added to every command's environment (LIMEN_DATABASE_URL).
	extra []string
}

const adminPassword = "admin-password"

func newHarness(t *testing.T) *harness {
	t.Helper()
	return newHarnessEnv(t)
}

// newHarnessEnv is newHarness with extra environment variables for every
// command, the proxy's included.
func newHarnessEnv(t *testing.T, extra ...string) *harness {
	t.Helper()
	h := &harness{t: t, home: filepath.Join(t.TempDir(), "home"), data: filepath.Join(t.TempDir(), "data"), extra: extra}
	h.ok("", "users", "add", "root", "--local", "--data-dir", h.data, "--trait", "groups=admins", "--password-stdin", adminPassword+"\n")
	h.startProxy()
	return h
}

// startProxy starts `limen proxy` on h.data and waits for it to listen.
func (h *harness) startProxy() {
	t := h.t
	t.Helper()
	cmd := exec.Command(limenBin, "proxy", "--listen", "127.0.0.1:0", "--data-dir", h.data, "--clusters", "prod,staging")
	cmd.Env = h.env()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	deadline := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
	defer deadline.Stop()
	for sc.Scan() {
		line := sc.Text()
		if addr, ok := strings.CutPrefix(line, "Limen proxy listening on https://"); ok {
			h.proxy = addr
		}
		if fp, ok := strings.CutPrefix(line, "CA fingerprint: "); ok {
			h.fp = fp
			break
		}
	}
	if h.proxy == "" || h.fp == "" {
		t.Fatalf("proxy did not start: %s", stderr.String())
	}
	go io.Copy(io.Discard, out)
}

func (h *harness) env() []string {
	env := []string{"LIMEN_HOME=" + h.home, "PATH=" + os.Getenv("PATH"), "HOME=" + h.home}
	return append(env, h.extra...)
}

// run runs limen with args; a last argument ending in "\n" is stdin.
func (h *harness) run(args ...string) (stdout, stderr string, err error) {
	h.t.Helper()
	var stdin string
	if n := len(args); n > 0 && strings.HasSuffix(args[n-1], "\n") {
		stdin, args = args[n-1], args[:n-1]
	}
	cmd := exec.Command(limenBin, args...)
	cmd.Env = h.env()
	cmd.Stdin = strings.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// ok runs limen and fails the test unless it succeeds. The first argument
// is ignored (it reads well as a label).
func (h *harness) ok(_ string, args ...string) string {
	h.t.Helper()
	out, errOut, err := h.run(args...)
	if err != nil {
		h.t.Fatalf("limen %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// fails runs limen, requires a non-zero exit and returns stderr.
func (h *harness) fails(args ...string) string {
	h.t.Helper()
	out, errOut, err := h.run(args...)
	if err == nil {
		h.t.Fatalf("limen %s succeeded, want failure\nstdout: %s", strings.Join(args, " "), out)
	}
	return errOut
}

func (h *harness) login(user, password string) {
	h.t.Helper()
	h.ok("login", "login", "--proxy", h.proxy, "--user", user, "--ca-fingerprint", h.fp, "--password-stdin", password+"\n")
}

func (h *harness) profile() *profile.Profile {
	p, err := profile.Open(h.home, h.proxy)
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

// authority opens the proxy's CA from its data directory with a clock
// shifted by skew, to issue certificates the proxy would have issued then.
func (h *harness) authority(skew time.Duration) *ca.Authority {
	h.t.Helper()
	a, err := ca.Open(ca.Options{DataDir: h.data, Logger: slog.New(slog.DiscardHandler),
		Now: func() time.Time { return time.Now().Add(skew) }})
	if err != nil {
		h.t.Fatal(err)
	}
	return a
}

// replaceCert issues a certificate for the profile's key, as the proxy
// would have at now+skew, and stores it in the profile.
func (h *harness) replaceCert(p identity.Principal, skew time.Duration) *x509.Certificate {
	h.t.Helper()
	keyPEM, err := os.ReadFile(filepath.Join(h.profile().Dir, profile.FileKey))
	if err != nil {
		h.t.Fatal(err)
	}
	key, err := ca.ParseKeyPEM(keyPEM)
	if err != nil {
		h.t.Fatal(err)
	}
	c, err := h.authority(skew).IssueUser(key.Public(), p, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	h.writeCertDER(c.Raw)
	return c
}

func (h *harness) writeCertDER(der []byte) {
	h.t.Helper()
	if err := os.WriteFile(filepath.Join(h.profile().Dir, profile.FileCert), ca.CertPEM(der), 0o600); err != nil {
		h.t.Fatal(err)
	}
}
