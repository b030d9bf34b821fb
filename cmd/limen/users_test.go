package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/limenhq/limen/gateway/users"
)

func TestUsersCommands(t *testing.T) {
	h := newHarness(t)
	h.login("root", adminPassword)
	h.ok("add", "users", "add", "carol", "--trait", "groups=dev", "--trait", "groups=ops", "--trait", "team=web", "--password-stdin", "carol-password\n")
	out := h.ok("ls", "users", "ls")
	if !strings.Contains(out, "carol") || !strings.Contains(out, "groups=dev,ops") {
		t.Fatalf("users ls: %q", out)
	}
	var list []users.User
	if err := json.Unmarshal([]byte(h.ok("ls json", "users", "ls", "--json")), &list); err != nil || len(list) != 2 {
		t.Fatalf("users ls --json: %+v, %v", list, err)
	}
	if msg := h.fails("users", "add", "carol", "--password-stdin", "another-password\n"); !strings.Contains(msg, "exists") {
		t.Fatalf("duplicate add: %q", msg)
	}
	h.ok("passwd", "users", "passwd", "carol", "--password-stdin", "carol-new-password\n")
	h.fails("login", "--user", "carol", "--password-stdin", "carol-password\n")
	h.ok("login new password", "login", "--user", "carol", "--password-stdin", "carol-new-password\n")
	// carol is no admin: the policy refuses her the admin commands.
	if msg := h.fails("users", "ls"); !strings.Contains(msg, "users.list") {
		t.Fatalf("non-admin users ls: %q", msg)
	}
	h.login("root", adminPassword)
	h.ok("rm", "users", "rm", "carol")
	if msg := h.fails("users", "rm", "carol"); !strings.Contains(msg, "no such user") {
		t.Fatalf("rm twice: %q", msg)
	}
	for _, args := range [][]string{
		{"users", "add", "system:x", "--password-stdin", "password123\n"},
		{"users", "add", "dave", "--password-stdin", "short\n"},
		{"users", "add", "dave", "--trait", "novalue", "--password-stdin", "password123\n"},
		{"users", "add", "dave", "--password-stdin", "\n"},
		{"users", "add", "dave", "--local", "--password-stdin", "password123\n"},
	} {
		h.fails(args...)
	}
	// --local works without a proxy or a login.
	h.ok("logout", "logout")
	h.ok("local ls", "users", "ls", "--local", "--data-dir", h.data)
}
