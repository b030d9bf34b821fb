package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
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

// TestLocalBreakGlassUnlock: a locked admin is refused every admin call
// (their own unlock, adding an admin, minting a join token), and the
// break-glass on the proxy host — limen unlock --local — lifts the lock on
// the running proxy and is audited by the host's OS user.
func TestLocalBreakGlassUnlock(t *testing.T) {
	h := newHarness(t)
	h.login("root", adminPassword)
	h.ok("lock --local", "lock", "root", "--reason", "stolen laptop", "--local", "--data-dir", h.data)
	// The running proxy picks the lock up from its store.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, errOut, err := h.run("locks", "ls")
		if err != nil && strings.Contains(errOut, "user root is locked by local:") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the proxy did not put the --local lock in force within 10s: %v %s", err, errOut)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for name, args := range map[string][]string{
		"unlock themself": {"unlock", "root"},
		"add an admin":    {"users", "add", "eve", "--trait", "groups=admins", "--password-stdin", "eve-password\n"},
		"mint a token":    {"tokens", "create", "--cluster", "prod"},
	} {
		if msg := h.fails(args...); !strings.Contains(msg, "403") || !strings.Contains(msg, "stolen laptop") {
			t.Errorf("locked admin may %s: %q, want 403 naming the lock", name, msg)
		}
	}

	if msg := h.fails("unlock", "root", "--local", "--data-dir", t.TempDir()); !strings.Contains(msg, "no lock store") {
		t.Fatalf("--local with a data dir no proxy uses: %q", msg)
	}
	if out := h.ok("unlock --local", "unlock", "root", "--local", "--data-dir", h.data); !strings.Contains(out, "Unlocked user root.") {
		t.Fatalf("unlock --local: %q", out)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		if _, _, err := h.run("locks", "ls"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the proxy did not lift the lock within 10s of unlock --local")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if msg := h.fails("unlock", "root", "--local", "--data-dir", h.data); !strings.Contains(msg, "no such lock") {
		t.Fatalf("second unlock --local: %q", msg)
	}

	by, _ := localActor()
	out, err := runAuditCLI(t, "audit", "search", "--data-dir", h.data, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var changes, refusals []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e audit.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatal(err)
		}
		switch e.Type {
		case audit.TypeUserLock, audit.TypeUserUnlock:
			changes = append(changes, fmt.Sprintf("%s %s %s via=%s", e.Type, e.Principal, e.Fields["target"], e.Fields["via"]))
		case audit.TypeAuthDenied:
			refusals = append(refusals, e.Principal.String()+" "+e.Denied.Action+" "+e.Denied.Reason)
		}
	}
	want := []string{
		"user.lock " + by.String() + " user:root via=local",
		"user.unlock " + by.String() + " user:root via=local",
	}
	if strings.Join(changes, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lock changes audited:\n%s\nwant:\n%s", strings.Join(changes, "\n"), strings.Join(want, "\n"))
	}
	for _, what := range []string{"locks.list", "user.unlock", "users.add", "tokens.create"} {
		found := false
		for _, r := range refusals {
			found = found || strings.HasPrefix(r, "user:root admin admin action "+what+": locked: user root is locked by local:")
		}
		if !found {
			t.Errorf("no auth.denied (action admin) for root's %s; refusals:\n%s", what, strings.Join(refusals, "\n"))
		}
	}
}
