package policy

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/limenhq/limen/gateway/identity"
)

func TestEmbeddedExample(t *testing.T) {
	e := mustEmbedded(t, Options{})
	ctx := context.Background()
	tests := []struct {
		name string
		p    identity.Principal
		c    Cluster
		want []string
	}{
		{"alice on dev-labelled demo", alice, demo, []string{"limen:edit", "limen:view"}},
		{"alice on another dev cluster", alice, devTwo, []string{"limen:edit", "limen:view"}},
		{"alice on prod", alice, prod, []string{"limen:view"}},
		{"bob on demo", bob, demo, []string{"limen:view"}},
		{"bob on prod", bob, prod, nil},
		{"admin on prod", dana, prod, []string{"limen:edit"}},
		{"ci-deployer bot on demo", ci, demo, []string{"limen:edit"}},
		{"ci-deployer bot on prod", ci, prod, nil},
		{"user named like the bot", identity.Principal{ClientID: "kubectl", Kind: identity.KindUser, Name: "ci-deployer"}, demo, nil},
		// Provenance: the provider's bob is not the local bob, and the
		// provider's people bind through bindings.issuers.oidc only.
		{"the provider's bob", identity.Principal{ClientID: "kubectl", Kind: identity.KindUser, Name: "bob", Issuer: "oidc"}, demo, nil},
		{"the provider's alice", identity.Principal{ClientID: "kubectl", Kind: identity.KindUser, Name: "alice", Issuer: "oidc",
			Traits: map[string][]string{"groups": {"dev"}}}, demo, []string{"limen:edit", "limen:view"}},
		{"another provider's alice", identity.Principal{ClientID: "kubectl", Kind: identity.KindUser, Name: "alice", Issuer: "other",
			Traits: map[string][]string{"groups": {"dev"}}}, demo, nil},
		{"stranger", identity.Principal{ClientID: "kubectl", Kind: identity.KindUser, Name: "mallory", Traits: map[string][]string{"groups": {"Dev", "admins "}}}, demo, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 2 { // uncached, then cached
				d, err := e.Groups(ctx, tt.p, tt.c)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(d.Groups, tt.want) || !strings.HasPrefix(d.Revision, "embedded-") {
					t.Fatalf("Groups = %q @ %s, want %q", d.Groups, d.Revision, tt.want)
				}
			}
		})
	}
}

func TestCachedDecisionIsACopy(t *testing.T) {
	e := mustEmbedded(t, Options{})
	d, _ := e.Groups(context.Background(), alice, demo)
	d.Groups[0] = "system:masters"
	d2, _ := e.Groups(context.Background(), alice, demo)
	if d2.Groups[0] != "limen:edit" {
		t.Fatalf("cache was modified through a returned decision: %q", d2.Groups)
	}
}

func TestAllowGroups(t *testing.T) {
	e := mustEmbedded(t, Options{})
	ctx := context.Background()
	got, rev, err := e.AllowGroups(ctx, alice, prod, []string{"limen:edit", "limen:view", "system:masters", "limen:view"})
	if err != nil || rev == "" {
		t.Fatal(err, rev)
	}
	if !slices.Equal(got, []string{"limen:view"}) {
		t.Fatalf("AllowGroups = %q, want only limen:view", got)
	}
	got, _, _ = e.AllowGroups(ctx, bob, prod, []string{"limen:view"})
	if len(got) != 0 {
		t.Fatalf("bob on prod kept %q", got)
	}
}

func TestClusters(t *testing.T) {
	e := mustEmbedded(t, Options{})
	inv := []Cluster{demo, prod, devTwo}
	for _, tt := range []struct {
		p    identity.Principal
		want []string
	}{
		{alice, []string{"demo", "dev-2", "prod"}},
		{bob, []string{"demo"}},
		{ci, []string{"demo"}},
		{identity.Principal{ClientID: "kubectl", Kind: identity.KindUser, Name: "mallory"}, nil},
	} {
		got, err := e.Clusters(context.Background(), tt.p, inv)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("Clusters(%s) = %q, want %q", tt.p, got, tt.want)
		}
	}
}

func TestAdminAllow(t *testing.T) {
	e := mustEmbedded(t, Options{})
	for _, tt := range []struct {
		p    identity.Principal
		want bool
	}{{dana, true}, {alice, false}, {bob, false}, {ci, false}} {
		got, err := e.AdminAllow(context.Background(), tt.p, "session.kill")
		if err != nil || got != tt.want {
			t.Errorf("AdminAllow(%s) = %v, %v; want %v", tt.p, got, err, tt.want)
		}
	}
	if _, err := e.AdminAllow(context.Background(), dana, ""); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("empty action: err = %v, want ErrInvalidInput", err)
	}
}

func TestExplain(t *testing.T) {
	e := mustEmbedded(t, Options{})
	d, err := e.Explain(context.Background(), alice, demo)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.Roles["edit-dev"], []string{"limen:edit"}) || !slices.Equal(d.Roles["view-everywhere"], []string{"limen:view"}) || len(d.Roles) != 2 {
		t.Fatalf("Roles = %v", d.Roles)
	}
}

func TestHostileInput(t *testing.T) {
	e := mustEmbedded(t, Options{})
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		p    identity.Principal
		c    Cluster
	}{
		{"system user", identity.Principal{ClientID: "kubectl", Kind: identity.KindUser, Name: "system:admin"}, demo},
		{"unknown kind", identity.Principal{ClientID: "kubectl", Kind: "group", Name: "alice"}, demo},
		{"empty name", identity.Principal{ClientID: "kubectl", Kind: identity.KindUser}, demo},
		{"control in trait", identity.Principal{ClientID: "kubectl", Kind: identity.KindUser, Name: "a", Traits: map[string][]string{"groups": {"dev\x00"}}}, demo},
		{"empty cluster", alice, Cluster{}},
		{"cluster with newline", alice, Cluster{Name: "demo\n"}},
		{"label value too long", alice, Cluster{Name: "demo", Labels: map[string]string{"env": strings.Repeat("d", 64)}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, err := e.Groups(ctx, tt.p, tt.c)
			if !errors.Is(err, ErrInvalidInput) || len(d.Groups) != 0 {
				t.Fatalf("Groups = %v, %v; want ErrInvalidInput and nothing", d, err)
			}
		})
	}
}

func TestCacheKeyUnambiguous(t *testing.T) {
	pairs := [][2]struct {
		p identity.Principal
		c Cluster
	}{
		{{identity.Principal{ClientID: "kubectl", Kind: "user", Name: "ab"}, Cluster{Name: "c"}}, {identity.Principal{ClientID: "kubectl", Kind: "user", Name: "a"}, Cluster{Name: "bc"}}},
		{{identity.Principal{ClientID: "kubectl", Kind: "user", Name: "a", Traits: map[string][]string{"g": {"x", "y"}}}, Cluster{Name: "c"}},
			{identity.Principal{ClientID: "kubectl", Kind: "user", Name: "a", Traits: map[string][]string{"g": {"x"}, "y": nil}}, Cluster{Name: "c"}}},
		{{identity.Principal{ClientID: "kubectl", Kind: "user", Name: "a"}, Cluster{Name: "c", Labels: map[string]string{"k": "v"}}},
			{identity.Principal{ClientID: "kubectl", Kind: "user", Name: "a", Traits: map[string][]string{"k": {"v"}}}, Cluster{Name: "c"}}},
		// The provider's bob is not the local bob.
		{{identity.Principal{ClientID: "kubectl", Kind: "user", Name: "bob"}, Cluster{Name: "c"}},
			{identity.Principal{ClientID: "kubectl", Kind: "user", Name: "bob", Issuer: "oidc"}, Cluster{Name: "c"}}},
	}
	for i, pr := range pairs {
		if cacheKey(pr[0].p, pr[0].c) == cacheKey(pr[1].p, pr[1].c) {
			t.Errorf("pair %d: same key %q", i, cacheKey(pr[0].p, pr[0].c))
		}
	}
}
