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
