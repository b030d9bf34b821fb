package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
)

// runAuditCLI runs the limen command tree with args and returns stdout.
func runAuditCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func TestAuditSearchCLI(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := audit.Open(ctx, audit.Path(dir), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	kube := func(user, cluster, verb string, age time.Duration) audit.Event {
		return audit.Event{
			Type: audit.TypeKubeRequest, Time: now.Add(-age), Cluster: cluster,
			Principal: identity.Principal{Kind: identity.KindUser, Name: user},
			Kube:      &audit.KubeRequest{Verb: verb, Method: "GET", Path: "/api/v1/namespaces/a/pods/" + user + "-" + verb, Status: 200},
		}
	}
	for _, e := range []audit.Event{
		kube("alice", "prod", "get", 3*time.Hour),
		kube("alice", "prod", "delete", 30*time.Minute),
		kube("alice", "dev", "delete", 20*time.Minute),
		kube("bob", "prod", "delete", 10*time.Minute),
		{Type: audit.TypeAuthDenied, Time: now, Cluster: "prod", Denied: &audit.Denied{Hop: audit.HopProxy, Action: audit.ActionKube, Reason: "no groups"}},
		{Type: audit.TypeAuthDenied, Time: now.Add(-time.Minute), Principal: identity.Principal{Kind: identity.KindUser, Name: "alice"},
			Denied: &audit.Denied{Hop: audit.HopProxy, Action: audit.ActionAdmin, Reason: "admin action user.unlock: locked", Path: "/v1/admin/locks/user/alice"}},
	} {
		if err := s.Emit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}

	out, err := runAuditCLI(t, "audit", "search", "--data-dir", dir, "--user", "alice", "--cluster", "prod", "--verb", "delete", "--since", "1h")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "alice-delete") || !strings.Contains(lines[1], "user:alice") {
		t.Fatalf("table output:\n%s", out)
	}

	out, err = runAuditCLI(t, "audit", "search", "--data-dir", dir, "--type", "auth.denied", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(out, "\n") != 2 {
		t.Fatalf("--type auth.denied: want both refusals:\n%s", out)
	}

	// --action picks the refusals of one kind.
	out, err = runAuditCLI(t, "audit", "search", "--data-dir", dir, "--action", "kube", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var e audit.Event
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &e); err != nil || e.Denied == nil || e.Denied.Reason != "no groups" {
		t.Fatalf("--action kube json output %q: %v", out, err)
	}
	out, err = runAuditCLI(t, "audit", "search", "--data-dir", dir, "--action", "admin")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); err != nil || len(lines) != 2 ||
		!strings.Contains(lines[1], "proxy refused admin /v1/admin/locks/user/alice") {
		t.Fatalf("--action admin table output (%v):\n%s", err, out)
	}

	t.Setenv("LIMEN_DATA_DIR", dir)
	out, err = runAuditCLI(t, "audit", "search", "--since", "2h", "--json")
	if err != nil || strings.Count(out, "\n") != 5 {
		t.Fatalf("LIMEN_DATA_DIR, --since 2h: %v\n%s", err, out)
	}
}

// TestAuditSearchCLIOutcomeUnknown: requests sent whose outcome was never
// stored are listed as such, a write among them as possibly applied; one
// with its outcome shows as its kube.request alone.
func TestAuditSearchCLIOutcomeUnknown(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := audit.Open(ctx, audit.Path(dir), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	alice := identity.Principal{Kind: identity.KindUser, Name: "alice"}
	sent := func(id, method, verb, name string, age time.Duration) audit.Event {
		return audit.Event{Type: audit.TypeKubeSent, Time: now.Add(-age), Cluster: "prod", Principal: alice, SessionID: id,
			Kube: &audit.KubeRequest{Verb: verb, Method: method, Path: "/api/v1/namespaces/a/pods/" + name}}
	}
	answered := sent(strings.Repeat("a", 32), "GET", "get", "answered", 3*time.Minute)
	outcome := answered
	outcome.Type, outcome.Kube = audit.TypeKubeRequest, &audit.KubeRequest{Verb: "get", Method: "GET", Path: answered.Kube.Path, Status: 200}
	for _, e := range []audit.Event{
		answered, outcome,
		sent(strings.Repeat("b", 32), "GET", "get", "lost-read", 2*time.Minute),
		sent(strings.Repeat("c", 32), "DELETE", "delete", "lost-write", time.Minute),
	} {
		if err := s.Emit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	out, err := runAuditCLI(t, "audit", "search", "--data-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.Contains(lines[1], "kube.request") || !strings.Contains(lines[1], "answered 200") ||
		!strings.Contains(lines[2], "kube.sent") || !strings.Contains(lines[2], "lost-read outcome unknown") ||
		!strings.Contains(lines[3], "lost-write OUTCOME UNKNOWN: possibly applied, not fully audited") {
		t.Fatalf("table output:\n%s", out)
	}
	out, err = runAuditCLI(t, "audit", "search", "--data-dir", dir, "--outcome-unknown", "--verb", "delete", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var e audit.Event
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &e); err != nil || e.Type != audit.TypeKubeSent ||
		!e.OutcomeUnknown || !e.PossiblyApplied || !strings.HasSuffix(e.Kube.Path, "lost-write") {
		t.Fatalf("--outcome-unknown --verb delete --json: %q (%v), want the lost delete flagged", out, err)
	}
	out, err = runAuditCLI(t, "audit", "search", "--data-dir", dir, "--type", "kube.sent")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); err != nil || len(lines) != 4 || !strings.Contains(lines[1], "answered (outcome stored)") {
		t.Fatalf("--type kube.sent (%v):\n%s", err, out)
	}
}

func TestAuditSearchCLIErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"audit", "search"}, "data-dir: required"},
		{[]string{"audit", "search", "--data-dir", t.TempDir()}, "no audit store"},
		{[]string{"audit", "search", "--data-dir", t.TempDir(), "--since", "yesterday"}, "want a duration"},
		{[]string{"audit", "search", "--data-dir", t.TempDir(), "--since", "-1h"}, "must be positive"},
		{[]string{"audit", "search", "--data-dir", t.TempDir(), "--limit", "0"}, "limit 0"},
		{[]string{"audit", "search", "--data-dir", t.TempDir(), "--action", "delete"}, `action "delete": want one of kube, admin, login, enroll`},
		{[]string{"audit", "search", "--data-dir", t.TempDir(), "--action", "kube", "--type", "kube.request"}, "--action selects auth.denied"},
		{[]string{"audit", "search", "--data-dir", t.TempDir(), "--outcome-unknown", "--type", "kube.request"}, "--outcome-unknown selects kube.sent"},
	}
	for _, tt := range tests {
		_, err := runAuditCLI(t, tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want it to say %q", tt.args, err, tt.want)
		}
	}
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	got, err := parseSince("1h", now)
	if err != nil || !got.Equal(now.Add(-time.Hour)) {
		t.Errorf("1h: %v %v", got, err)
	}
	got, err = parseSince("2026-10-31T00:00:00Z", now)
	if err != nil || got.Day() != 31 {
		t.Errorf("RFC 3339: %v %v", got, err)
	}
}
