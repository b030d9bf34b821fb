package policy

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/policy/policytest"
)

// The example data makes edit-demo requestable by view-demo holders (bob),
// approved by edit-dev or admin holders (alice, dana).
func TestRequestableFromExampleData(t *testing.T) {
	e := mustEmbedded(t, Options{})
	ctx := context.Background()
	got, err := e.Requestable(ctx, bob, demo)
	if err != nil {
		t.Fatal(err)
	}
	want := RequestTerms{MaxDuration: time.Hour, ReasonRequired: true, Approvals: 1}
	if len(got) != 1 || got["edit-demo"] != want {
		t.Fatalf("Requestable(bob, demo) = %+v, want edit-demo %+v", got, want)
	}
	if got, _ := e.Requestable(ctx, bob, prod); len(got) != 0 {
		t.Fatalf("Requestable(bob, prod) = %+v, want none", got)
	}
}

func TestMayApprove(t *testing.T) {
	e := mustEmbedded(t, Options{})
	ctx := context.Background()
	for _, tt := range []struct {
		name     string
		approver identity.Principal
		want     bool
	}{
		{"approver by role edit-dev", alice, true},
		{"approver by role admin", dana, true},
		{"the requester", bob, false},
		{"a non-approver", identity.Principal{ClientID: "kubectl", Kind: identity.KindUser, Name: "carol"}, false},
		{"the provider's alice", identity.Principal{ClientID: "kubectl", Kind: identity.KindUser, Name: "alice", Issuer: "corp", Traits: alice.Traits}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ok, err := e.MayApprove(ctx, tt.approver, bob, "edit-demo", demo)
			if err != nil || ok != tt.want {
				t.Fatalf("MayApprove = %v, %v; want %v", ok, err, tt.want)
			}
		})
	}
}

// An elevation adds the role's groups on its cluster until it expires, and
// the cached decision without it is never reused for it (or the reverse).
func TestGroupsWithElevation(t *testing.T) {
	e := mustEmbedded(t, Options{})
	ctx := context.Background()
	plain, err := e.Groups(ctx, bob, demo)
	if err != nil || !slices.Equal(plain.Groups, []string{"limen:view"}) {
		t.Fatalf("Groups(bob) = %v, %v", plain.Groups, err)
	}
	up := bob
	up.Requests = []identity.Elevation{{Request: "r1", Role: "edit-demo", Cluster: "demo", Expires: time.Now().Add(time.Minute)}}
	d, err := e.Groups(ctx, up, demo)
	if err != nil || !slices.Equal(d.Groups, []string{"limen:edit", "limen:view"}) {
		t.Fatalf("Groups(bob elevated) = %v, %v; want limen:edit and limen:view", d.Groups, err)
	}
	up.Requests[0].Expires = time.Now().Add(-time.Second)
	if d, _ := e.Groups(ctx, up, demo); !slices.Equal(d.Groups, []string{"limen:view"}) {
		t.Fatalf("Groups(bob, expired elevation) = %v, want limen:view only", d.Groups)
	}
	other := bob
	other.Requests = []identity.Elevation{{Request: "r2", Role: "edit-demo", Cluster: "prod", Expires: time.Now().Add(time.Minute)}}
	if d, _ := e.Groups(ctx, other, demo); !slices.Equal(d.Groups, []string{"limen:view"}) {
		t.Fatalf("Groups(bob, elevation for another cluster) = %v, want limen:view only", d.Groups)
	}
	// A role bob may not request grants nothing even when carried.
	admin := bob
	admin.Requests = []identity.Elevation{{Request: "r3", Role: "admin", Cluster: "demo", Expires: time.Now().Add(time.Minute)}}
	if d, _ := e.Groups(ctx, admin, demo); !slices.Equal(d.Groups, []string{"limen:view"}) {
		t.Fatalf("Groups(bob carrying admin) = %v, want limen:view only", d.Groups)
	}
}

// A bundle that makes a role granting a system: group requestable is
// refused at activation, with a message naming the request.
func TestRequestableSystemGroupRefused(t *testing.T) {
	data := policytest.ExampleData(t)
	cfg := policytest.Config(t, data)
	cfg["roles"].(map[string]any)["edit-demo"].(map[string]any)["groups"] = []any{"limen:edit", "system:masters"}
	_, err := New(context.Background(), Options{Bundle: policytest.Bundle(t, "1", data), InsecureSkipVerify: true, Logger: quietLogger()})
	if err == nil || !strings.Contains(err.Error(), `requests.edit-demo: role "edit-demo" grants group system:masters, and a requestable role may never grant a "system:" group`) {
		t.Fatalf("New = %v; want the bundle refused for the requestable system: group", err)
	}
}
