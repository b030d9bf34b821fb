package e2e

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/limenhq/limen/test/cluster/clustertest"
	"github.com/limenhq/limen/test/idp"
)

// TestOIDCProvenance signs a person in through the real test IdP whose
// preferred_username is bob, with a proxy whose operator chose that
// (mutable) claim to name people: the person is the provider's bob,
// user:oidc:bob, and never acts as the local bob. The cluster sees
// oidc:bob with the provider's groups, not bob with the local bob's role;
// a lock on either bob leaves the other alone; limen status and limen audit
// search say where each comes from.
func TestOIDCProvenance(t *testing.T) {
	e := startOIDCEnv(t, "--oidc-username-claim", "preferred_username", "--oidc-username-claim-allow-mutable")
	ctx := context.Background()
	ns := clustertest.Namespace(t)
	// Not the local bob's password, and not his groups: the IdP's "dev"
	// gives the provider's people edit on env=dev clusters.
	e.idp.AddUser(idp.User{Email: "mallory@example.com", PreferredUsername: "bob", Password: "mallory-password", Groups: []string{"dev"}})

	home := filepath.Join(e.Dir, "home-idp-bob")
	lp := e.startLimen(t, home, "login", "--proxy", e.ProxyAddr, "--ca-fingerprint", e.Fingerprint, "--oidc", "--device")
	lp.line(t, "To sign in, open")
	complete, err := url.Parse(strings.TrimSpace(lp.line(t, "or open ")))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.idp.ApproveDevice(complete.Query().Get("user_code"), "mallory@example.com", "mallory-password"); err != nil {
		t.Fatalf("approve the device code: %v", err)
	}
	if out, err := lp.wait(t); err != nil || !strings.Contains(out, "as user:oidc:bob") {
		t.Fatalf("limen login --oidc --device as preferred_username bob: %v: %q", err, out)
	}
	status, err := e.limenAs(t, home, "status")
	if err != nil || !strings.Contains(status, "Logged in as: user:oidc:bob") || !strings.Contains(status, "From:        identity provider oidc") {
		t.Fatalf("limen status of the provider's bob: %v:\n%s", err, status)
	}
	idpKC := e.kubeLogin(t, home)
	if u := whoami(t, idpKC); u.Username != "oidc:bob" || !slices.Contains(u.Groups, "limen:edit") {
		t.Fatalf("whoami %+v: want oidc:bob with the provider's group dev (limen:edit), never the local bob", u)
	}

	localKC, err := e.Login(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	if u := whoami(t, localKC); u.Username != "bob" || !slices.Contains(u.Groups, "limen:view") || slices.Contains(u.Groups, "limen:edit") {
		t.Fatalf("whoami of the local bob: %+v, want bob with limen:view only (bindings.users.bob)", u)
	}
	if status, err := e.Limen(ctx, "bob", "", "status"); err != nil || !strings.Contains(status, "From:        local") {
		t.Fatalf("limen status of the local bob: %v:\n%s", err, status)
	}
	// The local bob may view, not edit; the provider's bob may edit.
	if _, stderr, code := kubectl(t, localKC, "", "-n", ns, "create", "configmap", "by-local-bob"); code == 0 {
		t.Fatalf("the local bob (view only) created a configmap: %s", stderr)
	}
	canEdit(t, idpKC, ns, "by-oidc-bob")
	t.Cleanup(func() { kubectl(t, idpKC, "", "-n", ns, "delete", "configmap", "by-oidc-bob") })

	admin := e.Home("admin")
	get := func(kc string) (string, int) {
		_, stderr, code := kubectl(t, kc, "", "-n", ns, "get", "configmaps")
		return stderr, code
	}
	for _, tc := range []struct {
		target           string
		locked, unlocked string
	}{{"user:oidc:bob", idpKC, localKC}, {"user:bob", localKC, idpKC}} {
		reason := "provenance lock on " + tc.target
		if _, err := e.limenAs(t, admin, "lock", tc.target, "--reason", reason); err != nil {
			t.Fatal(err)
		}
		eventually(t, func() string {
			if stderr, code := get(tc.locked); code == 0 || !strings.Contains(stderr, reason) {
				return fmt.Sprintf("locked %s: exit %d, stderr %q; want the lock's refusal", tc.target, code, stderr)
			}
			return ""
		})
		if stderr, code := get(tc.unlocked); code != 0 {
			t.Fatalf("a lock on %s refused the other bob: %s", tc.target, stderr)
		}
		if _, err := e.limenAs(t, admin, "unlock", tc.target); err != nil {
			t.Fatal(err)
		}
		eventually(t, func() string {
			if stderr, code := get(tc.locked); code != 0 {
				return fmt.Sprintf("unlocked %s: exit %d: %s", tc.target, code, stderr)
			}
			return ""
		})
	}

	// Audit tells them apart: searching the name finds both, each with
	// where it comes from; the qualified name finds the provider's only.
	out, err := e.limenAs(t, admin, "audit", "search", "--data-dir", e.ProxyDataDir(), "--user", "bob", "--type", "auth.login")
	if err != nil {
		t.Fatal(err)
	}
	var local, provider bool
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 4 && f[2] == "user:bob" && f[3] == "local" {
			local = true
		}
		if len(f) >= 4 && f[2] == "user:oidc:bob" && f[3] == "oidc" {
			provider = true
		}
	}
	if !local || !provider {
		t.Fatalf("audit search --user bob: want a login of each bob, with FROM local and oidc:\n%s", out)
	}
	out, err = e.limenAs(t, admin, "audit", "search", "--data-dir", e.ProxyDataDir(), "--user", "user:oidc:bob", "--type", "auth.login", "--json")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || len(lines) == 0 || lines[0] == "" {
		t.Fatalf("audit search --user user:oidc:bob --json: %v\n%s", err, out)
	}
	for _, l := range lines {
		if !strings.Contains(l, `"issuer":"oidc"`) {
			t.Fatalf("audit search --user user:oidc:bob found an event of another bob: %s", l)
		}
	}
}
