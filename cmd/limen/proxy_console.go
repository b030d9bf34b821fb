package main

import (
	"errors"
	"fmt"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/limenhq/limen/gateway/console"
)

// addConsoleFlags adds the proxy's console settings.
func addConsoleFlags(f *pflag.FlagSet) {
	f.String("console-oidc-redirect-uri", "", "the console's OIDC callback as registered at --oidc-issuer, https://PROXY/console/oidc/callback; "+
		"the console offers sign-in through the identity provider only when it is set (never derived from a request's Host)")
}

// loadConsoleRedirect reads and checks console-oidc-redirect-uri; oidc
// says whether --oidc-issuer is set.
func loadConsoleRedirect(v *viper.Viper, oidc bool) (string, error) {
	u := v.GetString("console-oidc-redirect-uri")
	switch {
	case u == "":
		return "", nil
	case !oidc:
		return "", errors.New("console-oidc-redirect-uri: set without --oidc-issuer")
	}
	if err := console.ValidOIDCRedirectURL(u); err != nil {
		return "", fmt.Errorf("console-oidc-redirect-uri: %w", err)
	}
	return u, nil
}
