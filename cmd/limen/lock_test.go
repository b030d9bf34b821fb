package main

import (
	"strings"
	"testing"
)

func TestLockArgumentErrors(t *testing.T) {
	h := &harness{t: t, home: t.TempDir()}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"lock", "alice"}, "reason: required"},
		{[]string{"lock", "alice", "--reason", " "}, "reason: required"},
		{[]string{"lock", "group:dev", "--reason", "x"}, "must be \"user\" or \"bot\""},
		{[]string{"lock", "system:admin", "--reason", "x"}, "must be \"user\" or \"bot\""},
		{[]string{"lock", "alice", "--reason", "x", "--ttl", "10ms"}, "at least 1s"},
		{[]string{"unlock", "bot:"}, "lock target name"},
		{[]string{"sessions", "kill", "../x"}, "session id"},
		{[]string{"lock"}, "accepts 1 arg"},
	}
	for _, tt := range tests {
		if msg := h.fails(tt.args...); !strings.Contains(msg, tt.want) {
			t.Errorf("limen %s: %q, want it to mention %q", strings.Join(tt.args, " "), msg, tt.want)
		}
	}
}

// TestLockCommands drives lock, locks ls, unlock and sessions against a
// running proxy.
func TestLockCommands(t *testing.T) {
	h := newHarness(t)
	h.login("root", adminPassword)
	h.ok("ls before any lock", "locks", "ls")
	out := h.ok("lock", "lock", "alice", "--reason", "incident 42", "--ttl", "1h")
	if !strings.Contains(out, "user alice is locked by user:root: incident 42 (until ") {
		t.Fatalf("lock output %q", out)
	}
	if out := h.ok("ls", "locks", "ls"); !strings.Contains(out, "user:alice") || !strings.Contains(out, "incident 42") {
		t.Fatalf("locks ls: %q", out)
	}
	h.ok("unlock", "unlock", "alice")
	if msg := h.fails("unlock", "alice"); !strings.Contains(msg, "404") {
		t.Fatalf("second unlock: %q", msg)
	}
	if out := h.ok("sessions", "sessions", "ls"); !strings.Contains(out, "ID") {
		t.Fatalf("sessions ls: %q", out)
	}
	if msg := h.fails("sessions", "kill", "0123abcd"); !strings.Contains(msg, "404") {
		t.Fatalf("kill of unknown session: %q", msg)
	}
}
