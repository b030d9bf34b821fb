package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/enroll"
)

// TestIdentityRefusalsAudited runs a real proxy and checks that the identity
// API's refusals reach its audit store as auth.denied events with their
// details: a wrong password, an admin call by a non-admin, a reused join
// token. (They were once emitted without a denied body, failed validation
// and were dropped, or stored under other types.)
func TestIdentityRefusalsAudited(t *testing.T) {
	h := newHarness(t)
	h.fails("login", "--proxy", h.proxy, "--user", "root", "--ca-fingerprint", h.fp, "--password-stdin", "not-the-password\n")
	h.ok("add bob", "users", "add", "bob", "--local", "--data-dir", h.data, "--password-stdin", "bob-password\n")
	h.login("bob", "bob-password")
	h.fails("tokens", "create", "--cluster", "prod")
	h.login("root", adminPassword)
	token := strings.TrimSpace(h.ok("create", "tokens", "create", "--cluster", "prod", "--ttl", "1h"))
	worker := func() []string {
		return []string{"worker", "--enroll-only", "--proxy", h.proxy, "--kube-cluster", "prod", "--data-dir", t.TempDir(), "--join-token", token}
	}
	tok, err := enroll.ParseToken(token)
	if err != nil {
		t.Fatal(err)
	}
	h.ok("enroll", worker()...)
	h.fails(worker()...)

	out, err := runAuditCLI(t, "audit", "search", "--data-dir", h.data, "--type", string(audit.TypeAuthDenied), "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got []audit.Event
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e audit.Event
		if line == "" {
			continue
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("audit search line %q: %v", line, err)
		}
		got = append(got, e)
	}
	wants := []struct{ who, reason, path, field, value string }{
		{"", "login: bad credentials", "/v1/login", "user", "root"},
		{"user:bob", "admin action tokens.create not allowed", "/v1/admin/tokens", "", ""},
		{"", "join token: join token was used already", "/v1/enroll", "token_id", tok.ID()},
	}
	if len(got) != len(wants) {
		t.Fatalf("%d auth.denied events in the audit store, want %d:\n%s", len(got), len(wants), out)
	}
	for i, w := range wants {
		e := got[i]
		who := ""
		if e.Principal.Name != "" {
			who = e.Principal.String()
		}
		if e.Validate() != nil || e.Denied.Hop != audit.HopProxy || !strings.HasPrefix(e.Denied.Reason, w.reason) ||
			e.Denied.Path != w.path || who != w.who || e.Fields[w.field] != w.value || e.ClientAddr != "127.0.0.1" {
			t.Errorf("event %d: %+v denied %+v, want %+v", i, e, e.Denied, w)
		}
	}
}
