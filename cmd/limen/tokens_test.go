package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/enroll"
	"github.com/limenhq/limen/gateway/identity"
)

func TestTokensAndWorkerEnrollment(t *testing.T) {
	h := newHarness(t)
	h.login("root", adminPassword)
	token := strings.TrimSpace(h.ok("create", "tokens", "create", "--cluster", "prod", "--ttl", "1h"))
	if _, err := enroll.ParseToken(token); err != nil {
		t.Fatalf("printed token %q: %v", token, err)
	}
	if !strings.HasSuffix(token, strings.TrimPrefix(h.fp, "sha256:")) {
		t.Fatalf("token %q does not carry the CA fingerprint %s", token, h.fp)
	}
	worker := func(dir, cluster, tok string) []string {
		args := []string{"worker", "--enroll-only", "--proxy", h.proxy, "--kube-cluster", cluster, "--data-dir", dir}
		if tok != "" {
			args = append(args, "--join-token", tok)
		}
		return args
	}
	w1 := t.TempDir()
	if msg := h.fails(worker(w1, "staging", token)...); !strings.Contains(msg, "another cluster") {
		t.Fatalf("token used for another cluster: %q", msg)
	}
	if out := h.ok("enroll", worker(w1, "prod", token)...); !strings.Contains(out, "cluster prod enrolled") {
		t.Fatalf("enroll: %q", out)
	}
	if msg := h.fails(worker(t.TempDir(), "prod", token)...); !strings.Contains(msg, "used already") {
		t.Fatalf("token reused: %q", msg)
	}
	// Restart: the stored certificate suffices, no token.
	if out := h.ok("restart", worker(w1, "prod", "")...); !strings.Contains(out, "enrolled") {
		t.Fatalf("restart: %q", out)
	}
	if msg := h.fails(worker(t.TempDir(), "prod", "")...); !strings.Contains(msg, "--join-token") {
		t.Fatalf("no token, not enrolled: %q", msg)
	}
	if msg := h.fails(worker(w1, "staging", "")...); !strings.Contains(msg, "enrolled for cluster prod") {
		t.Fatalf("wrong cluster for stored identity: %q", msg)
	}
	for _, f := range []string{"key.pem", "cert.pem", "ca.pem", "grant.pub"} {
		fi, err := os.Stat(filepath.Join(w1, "worker", f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("worker file %s: %v %v", f, fi, err)
		}
	}
	id, err := enroll.LoadWorkerIdentity(w1)
	if err != nil || !id.GrantKey.Equal(h.authority(0).GrantPublicKey()) {
		t.Fatalf("worker identity: %+v, %v", id, err)
	}

	// An expired token: created in the token store as of two hours ago, and
	// audited in the running proxy's audit store.
	trail, err := audit.Open(context.Background(), audit.Path(h.data), audit.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer trail.Close()
	store, err := enroll.OpenTokenStore(enroll.TokenStorePath(h.data), enroll.TokenStoreOptions{
		Audit: trail, Now: func() time.Time { return time.Now().Add(-2 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	old, _, err := store.Create(context.Background(), "prod", time.Hour, h.fp, identity.Principal{Kind: identity.KindUser, Name: "root"})
	store.Close()
	if err != nil {
		t.Fatal(err)
	}
	if msg := h.fails(worker(t.TempDir(), "prod", old.String())...); !strings.Contains(msg, "expired") {
		t.Fatalf("expired token: %q", msg)
	}
	if msg := h.fails(worker(t.TempDir(), "prod", "lj1.garbage")...); !strings.Contains(msg, "malformed join token") {
		t.Fatalf("malformed token: %q", msg)
	}
	if out := h.ok("ls", "tokens", "ls"); !strings.Contains(out, "prod") || strings.Contains(out, token) {
		t.Fatalf("tokens ls must list tokens without secrets: %q", out)
	}
}

func TestTokensRequireAdmin(t *testing.T) {
	h := newHarness(t)
	h.ok("add bob", "users", "add", "bob", "--local", "--data-dir", h.data, "--password-stdin", "bob-password\n")
	h.login("bob", "bob-password")
	if msg := h.fails("tokens", "create", "--cluster", "prod"); !strings.Contains(msg, "403") || !strings.Contains(msg, "tokens.create") {
		t.Fatalf("non-admin token create: %q", msg)
	}
	for _, args := range [][]string{
		{"tokens", "create"},
		{"tokens", "create", "--cluster", "prod", "--ttl", "1s"},
		{"tokens", "create", "--cluster", "prod", "--ttl", "720h"},
	} {
		h.fails(args...)
	}
}
