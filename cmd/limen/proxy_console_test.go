package main

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// console-oidc-redirect-uri is checked at start, and every refusal names
// the key.
func TestLoadConsoleRedirect(t *testing.T) {
	load := func(oidc bool, args ...string) (string, error) {
		f := pflag.NewFlagSet("proxy", pflag.ContinueOnError)
		addConsoleFlags(f)
		if err := f.Parse(args); err != nil {
			t.Fatal(err)
		}
		v := viper.New()
		if err := v.BindPFlags(f); err != nil {
			t.Fatal(err)
		}
		return loadConsoleRedirect(v, oidc)
	}
	good := "https://limen.example.com:8443/console/oidc/callback"
	if u, err := load(true, "--console-oidc-redirect-uri", good); err != nil || u != good {
		t.Fatalf("%q: %q, %v", good, u, err)
	}
	if u, err := load(true); err != nil || u != "" {
		t.Fatalf("unset: %q, %v; want off", u, err)
	}
	for _, tc := range []struct {
		oidc bool
		uri  string
	}{
		{false, good},
		{true, "http://limen.example.com/console/oidc/callback"},
		{true, "https://limen.example.com/callback"},
		{true, "https://limen.example.com/console/oidc/callback?next=/"},
	} {
		if _, err := load(tc.oidc, "--console-oidc-redirect-uri", tc.uri); err == nil || !strings.HasPrefix(err.Error(), "console-oidc-redirect-uri") {
			t.Errorf("%q (oidc %v): %v, want an error naming console-oidc-redirect-uri", tc.uri, tc.oidc, err)
		}
	}
}
