package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
)

// TestAuditTableNamesTheClient: an application's requests say which client
// made them; the command line's stay as they were.
func TestAuditTableNamesTheClient(t *testing.T) {
	ev := func(client string) audit.Event {
		return audit.Event{Type: audit.TypeAuthDenied, Time: time.Now(), Cluster: "demo",
			Principal: identity.Principal{Kind: identity.KindUser, Name: "alice", ClientID: client},
			Denied:    &audit.Denied{Hop: audit.HopProxy, Action: audit.ActionKube, Reason: "scope: get secrets"}}
	}
	var b bytes.Buffer
	if err := writeEventsTable(&b, []audit.Event{ev("coffee-menu"), ev(identity.ClientKubectl)}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "user:alice via coffee-menu") || strings.Contains(lines[2], " via ") {
		t.Fatalf("table:\n%s", b.String())
	}
}

// TestAuditTableShowsProvenance: the local bob and identity provider
// corp's bob are told apart in the table: WHO names the provider and FROM
// says where each comes from.
func TestAuditTableShowsProvenance(t *testing.T) {
	ev := func(issuer string) audit.Event {
		return audit.Event{Type: audit.TypeAuthLogin, Time: time.Now(),
			Principal: identity.Principal{Kind: identity.KindUser, Name: "bob", Issuer: issuer, ClientID: identity.ClientKubectl}}
	}
	var b bytes.Buffer
	if err := writeEventsTable(&b, []audit.Event{ev(""), ev("corp"), {Type: audit.TypeAuthDenied, Time: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 || strings.Join(strings.Fields(lines[0])[2:4], " ") != "WHO FROM" {
		t.Fatalf("table:\n%s", b.String())
	}
	local, corp, nobody := strings.Fields(lines[1]), strings.Fields(lines[2]), strings.Fields(lines[3])
	if local[2] != "user:bob" || local[3] != "local" || corp[2] != "user:corp:bob" || corp[3] != "corp" || nobody[2] != "-" || nobody[3] != "-" {
		t.Fatalf("table:\n%s", b.String())
	}
}
