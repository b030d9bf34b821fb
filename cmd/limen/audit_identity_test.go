package main

import (
	"encoding/json"
	"fmt"
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
	// One line per event: who|hop|path|fields|client|reason.
	var got []string
	for _, line := range strings.Split(out, "\n") {
		if line == "" {
			continue
		}
		var e audit.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.Validate() != nil || e.Denied == nil {
			t.Fatalf("audit search line %q: not a valid auth.denied event (%v)", line, err)
		}
		got = append(got, fmt.Sprintf("%s|%s|%s|%v|%s|%s", e.Principal.Name, e.Denied.Hop, e.Denied.Path, e.Fields, e.ClientAddr, e.Denied.Reason))
	}
	want := []string{
		"|proxy|/v1/login|map[user:root]|127.0.0.1|login: bad credentials",
		"bob|proxy|/v1/admin/tokens|map[]|127.0.0.1|admin action tokens.create not allowed",
		"|proxy|/v1/enroll|map[token_id:" + tok.ID() + "]|127.0.0.1|join token: join token was used already",
	}
	if len(got) != len(want) {
		t.Fatalf("auth.denied events in the audit store:\n%s\nwant %d", strings.Join(got, "\n"), len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("event %d:\n got %s\nwant %s…", i, got[i], want[i])
		}
	}
}
