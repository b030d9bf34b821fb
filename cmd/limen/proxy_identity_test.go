package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

func identityViper(t *testing.T, args ...string) *viper.Viper {
	t.Helper()
	f := pflag.NewFlagSet("proxy", pflag.ContinueOnError)
	addIdentityFlags(f)
	if err := f.Parse(args); err != nil {
		t.Fatal(err)
	}
	v := viper.New()
	if err := v.BindPFlags(f); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestLoadIdentity(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("s3cret\n"), 0o600)
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, nil, 0o600)
	base := []string{"--oidc-issuer", "https://login.example.com", "--oidc-client-id", "limen", "--oidc-client-secret-file", secret}

	pc, cis, err := loadIdentity(identityViper(t, append(base, "--oidc-trait", "groups=groups", "--oidc-trait", "team=department",
		"--ci-issuer", "github=https://token.actions.githubusercontent.com")...))
	if err != nil {
		t.Fatal(err)
	}
	if pc.ClientSecret != "s3cret" || pc.Mapping.Traits["team"] != "department" || pc.Mapping.Username != "email" {
		t.Fatalf("config %+v", pc)
	}
	if len(cis) != 1 || cis[0].Name != "github" || cis[0].Audience != "limen" || cis[0].Kind != "github" {
		t.Fatalf("CI issuers %+v", cis)
	}
	if pc, cis, err := loadIdentity(identityViper(t)); err != nil || pc != nil || cis != nil {
		t.Fatalf("no flags: %+v %+v %v", pc, cis, err)
	}

	for _, tc := range []struct {
		args []string
		key  string
	}{
		{[]string{"--oidc-issuer", "http://login.example.com", "--oidc-client-id", "x", "--oidc-client-secret-file", secret}, "oidc-issuer"},
		{[]string{"--oidc-issuer", "https://login.example.com", "--oidc-client-secret-file", secret}, "oidc-client-id"},
		{[]string{"--oidc-issuer", "https://login.example.com", "--oidc-client-id", "x"}, "oidc-client-secret-file"},
		{[]string{"--oidc-issuer", "https://login.example.com", "--oidc-client-id", "x", "--oidc-client-secret-file", empty}, "oidc-client-secret-file"},
		{[]string{"--oidc-client-id", "x"}, "oidc-client-id: set without --oidc-issuer"},
		{append(base, "--oidc-trait", "groups"), "oidc-trait"},
		{append(base, "--oidc-trait", "a:b=groups"), "oidc-trait"},
		{append(base, "--oidc-trait", "g=groups", "--oidc-trait", "g=roles"), "oidc-trait"},
		{append(base, "--oidc-username-claim", ""), "oidc-username-claim"},
		{[]string{"--ci-issuer", "https://token.actions.githubusercontent.com"}, "ci-issuer"},
		{[]string{"--ci-issuer", "gh=http://ci.example.com"}, "ci-issuer"},
		{[]string{"--ci-issuer", "gh=https://a.example", "--ci-issuer", "gh=https://b.example"}, "ci-issuer"},
		// Which claims bind an owner depends on the CI system: one Limen
		// cannot tell by its URL must be named.
		{[]string{"--ci-issuer", "ci=https://ci.example.com"}, "ci-issuer"},
		{[]string{"--ci-issuer", "ci=https://ci.example.com", "--ci-issuer-kind", "ci=jenkins"}, "ci-issuer-kind"},
		{[]string{"--ci-issuer", "gh=https://token.actions.githubusercontent.com", "--ci-issuer-kind", "other=github"}, "ci-issuer-kind other"},
		// People named by a claim they can change: refused unless accepted.
		{append(base, "--oidc-username-claim", "preferred_username"), "oidc-username-claim"},
		{append(base, "--oidc-username-claim", "nickname"), "oidc-username-claim"},
		{append(base, "--oidc-issuer-name", "local"), "oidc-issuer-name"},
		{append(base, "--oidc-issuer-name", "Corp"), "oidc-issuer-name"},
	} {
		_, _, err := loadIdentity(identityViper(t, tc.args...))
		if err == nil || !strings.HasPrefix(err.Error(), tc.key) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.key)
		}
	}
}

func TestLoadIdentityProvenance(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("s3cret\n"), 0o600)
	base := []string{"--oidc-issuer", "https://login.example.com", "--oidc-client-id", "limen", "--oidc-client-secret-file", secret}
	pc, _, err := loadIdentity(identityViper(t, base...))
	if err != nil || pc.Name != "oidc" {
		t.Fatalf("default issuer name: %+v, %v", pc, err)
	}
	_, _, err = loadIdentity(identityViper(t, append(base, "--oidc-username-claim", "preferred_username")...))
	if err == nil || !strings.Contains(err.Error(), "oidc-username-claim-allow-mutable") {
		t.Fatalf("the refusal of preferred_username must name the key that accepts it: %v", err)
	}
	pc, _, err = loadIdentity(identityViper(t, append(base, "--oidc-username-claim", "preferred_username",
		"--oidc-username-claim-allow-mutable", "--oidc-issuer-name", "corp")...))
	if err != nil || pc.Name != "corp" || !pc.Mapping.AllowMutableUsername {
		t.Fatalf("accepted mutable claim: %+v, %v", pc, err)
	}
	_, cis, err := loadIdentity(identityViper(t, "--ci-issuer", "ci=http://127.0.0.1:1", "--ci-issuer-kind", "ci=github"))
	if err != nil || len(cis) != 1 || cis[0].Kind != "github" {
		t.Fatalf("stated kind: %+v, %v", cis, err)
	}
}
