package main

import (
	"bytes"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/profile"
)

func TestLoginStatusLogout(t *testing.T) {
	h := newHarness(t)
	if msg := h.fails("status"); !strings.Contains(msg, "run limen login") {
		t.Fatalf("status before login: %q", msg)
	}
	h.login("root", adminPassword)
	out := h.ok("status", "status")
	for _, want := range []string{"user:root", "From:        local", "groups=admins", "Valid until", "prod, staging", h.proxy} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	if out := h.ok("logout", "logout"); !strings.Contains(out, "Logged out") {
		t.Fatalf("logout: %q", out)
	}
	if msg := h.fails("status"); !strings.Contains(msg, "run limen login") {
		t.Fatalf("status after logout: %q", msg)
	}
	if out := h.ok("logout again", "logout"); !strings.Contains(out, "Not logged in") {
		t.Fatalf("second logout: %q", out)
	}
}

func TestLoginRefusesBadPasswordAlike(t *testing.T) {
	h := newHarness(t)
	wrong := h.fails("login", "--proxy", h.proxy, "--user", "root", "--ca-fingerprint", h.fp, "--password-stdin", "nope-nope\n")
	unknown := h.fails("login", "--proxy", h.proxy, "--user", "ghost", "--ca-fingerprint", h.fp, "--password-stdin", "nope-nope\n")
	if wrong != unknown || !strings.Contains(wrong, "invalid user name or password") {
		t.Fatalf("wrong password %q, unknown user %q: must read the same", wrong, unknown)
	}
	if msg := h.fails("login", "--proxy", h.proxy, "--user", "root", "--ca-fingerprint", h.fp); !strings.Contains(msg, "password-stdin") {
		t.Fatalf("login without a terminal: %q", msg)
	}
}

func TestLoginWrongCA(t *testing.T) {
	h := newHarness(t)
	other := newHarness(t)
	msg := h.fails("login", "--proxy", h.proxy, "--user", "root", "--ca-fingerprint", other.fp, "--password-stdin", adminPassword+"\n")
	if !strings.Contains(msg, "pinned fingerprint") {
		t.Fatalf("wrong fingerprint: %q", msg)
	}
	otherCA := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(otherCA, other.authority(0).RootPEM(), 0o644)
	msg = h.fails("login", "--proxy", h.proxy, "--user", "root", "--ca-file", otherCA, "--password-stdin", adminPassword+"\n")
	if !strings.Contains(msg, "certificate") {
		t.Fatalf("wrong CA file: %q", msg)
	}
	// No trust given and no stored CA: the system roots do not know the proxy.
	if msg := h.fails("login", "--proxy", h.proxy, "--user", "root", "--password-stdin", adminPassword+"\n"); !strings.Contains(msg, "certificate") {
		t.Fatalf("system roots: %q", msg)
	}
	if msg := h.fails("login", "--proxy", h.proxy, "--ca-fingerprint", "sha256:1234", "--password-stdin", "x\n"); !strings.Contains(msg, "fingerprint") {
		t.Fatalf("malformed fingerprint: %q", msg)
	}
	// The right CA file works, and later logins reuse the stored CA.
	good := filepath.Join(t.TempDir(), "good.pem")
	os.WriteFile(good, h.authority(0).RootPEM(), 0o644)
	h.ok("ca-file", "login", "--proxy", h.proxy, "--user", "root", "--ca-file", good, "--password-stdin", adminPassword+"\n")
	h.ok("stored CA", "login", "--user", "root", "--password-stdin", adminPassword+"\n")
}

func TestProfilePermissions(t *testing.T) {
	h := newHarness(t)
	h.login("root", adminPassword)
	p := h.profile()
	if fi, err := os.Stat(p.Dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("profile directory: %v, %v; want 0700", fi.Mode(), err)
	}
	for _, f := range []string{profile.FileKey, profile.FileCert, profile.FileCA} {
		if fi, err := os.Stat(filepath.Join(p.Dir, f)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, %v; want 0600", f, fi.Mode(), err)
		}
	}
	if strings.Contains(p.Dir, ":") {
		t.Fatalf("profile directory %s contains ':', which breaks KUBECONFIG lists", p.Dir)
	}
	key := filepath.Join(p.Dir, profile.FileKey)
	os.Chmod(key, 0o644)
	if msg := h.fails("kube", "credentials"); !strings.Contains(msg, "chmod 600") {
		t.Fatalf("world-readable key: %q", msg)
	}
	os.Chmod(key, 0o600)
	os.Chmod(p.Dir, 0o755)
	if msg := h.fails("kube", "credentials"); !strings.Contains(msg, "chmod 700") {
		t.Fatalf("open profile directory: %q", msg)
	}
	os.Chmod(p.Dir, 0o700)
	elsewhere := filepath.Join(t.TempDir(), "key.pem")
	os.Rename(key, elsewhere)
	os.Symlink(elsewhere, key)
	if msg := h.fails("kube", "credentials"); !strings.Contains(msg, "symbolic link") {
		t.Fatalf("symlinked key: %q", msg)
	}
	os.Remove(key)
	os.WriteFile(key, []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), 0o600)
	if msg := h.fails("kube", "credentials"); !strings.Contains(msg, "run limen login") {
		t.Fatalf("damaged key: %q", msg)
	}
}

func TestExpiredCertificate(t *testing.T) {
	h := newHarness(t)
	h.login("root", adminPassword)
	root := identity.Principal{Kind: identity.KindUser, Name: "root", Traits: map[string][]string{"groups": {"admins"}}}
	h.replaceCert(root, -9*time.Hour)
	for _, args := range [][]string{{"status"}, {"kube", "credentials"}, {"kube", "ls"}, {"tokens", "create", "--cluster", "prod"}} {
		if msg := h.fails(args...); !strings.Contains(msg, "expired") || !strings.Contains(msg, "run limen login") {
			t.Errorf("limen %s with an expired certificate: %q", strings.Join(args, " "), msg)
		}
	}
}

func TestTamperedCertificateExtension(t *testing.T) {
	h := newHarness(t)
	h.ok("add bob", "users", "add", "bob", "--local", "--data-dir", h.data, "--trait", "groups=dev", "--password-stdin", "bob-password\n")
	h.login("bob", "bob-password")
	certPEM, _ := os.ReadFile(filepath.Join(h.profile().Dir, profile.FileCert))
	b, _ := pem.Decode(certPEM)
	// Promote bob to the admins group inside the signed extension (same
	// length, so the DER stays well formed): the signature no longer holds.
	tampered := bytes.Replace(b.Bytes, []byte("dev"), []byte("adm"), 1)
	if bytes.Equal(tampered, b.Bytes) {
		t.Fatal("test setup: trait value not found in the certificate")
	}
	h.writeCertDER(tampered)
	// In TLS 1.3 the proxy refuses the certificate after the client's side
	// of the handshake is done, so the client sees an alert, a reset or a
	// broken pipe; whichever, nothing is listed and the user is told what to do.
	out, msg, err := h.run("users", "ls")
	if err == nil || out != "" || !strings.Contains(msg, "run limen login") {
		t.Fatalf("tampered certificate: err %v, stdout %q, stderr %q", err, out, msg)
	}
	// A certificate the proxy did sign but whose extension is malformed is
	// refused by the client before it is ever sent.
	h.writeCertDER(bytes.Replace(b.Bytes, []byte("bob"), []byte("eve"), 1))
	if msg := h.fails("status"); !strings.Contains(msg, "certificate") {
		t.Fatalf("subject/extension mismatch: %q", msg)
	}
}
