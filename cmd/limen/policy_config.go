package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/limenhq/limen/gateway/policy"
)

// addPolicyFlags registers the policy source settings shared by the proxy,
// the worker and `limen policy`. With none set, the embedded default policy
// is used.
func addPolicyFlags(f *pflag.FlagSet) {
	f.String("policy-bundle-url", "", "OPA bundle service resource to poll, https://…/bundle.tar.gz (default: the embedded policy)")
	f.String("policy-public-key", "", "PEM public key file that bundle signatures must verify against (required with --policy-bundle-url)")
	f.String("policy-key-id", policy.DefaultKeyID, "key id the bundle signature names")
	f.String("policy-key-algorithm", policy.DefaultKeyAlgorithm, "bundle signature algorithm (RS256, ES256, …)")
	f.Duration("policy-min-delay", policy.DefaultMinDelay, "shortest wait between two bundle polls")
	f.Duration("policy-max-delay", policy.DefaultMaxDelay, "longest wait between two bundle polls")
	f.String("policy-persist-dir", "", "directory for the last good bundle and the policy status (default: <data-dir>/policy when data-dir is set)")
}

// policyOptions reads the settings registered by addPolicyFlags. Errors
// name the key; policy.New validates the rest.
func policyOptions(v *viper.Viper, log *slog.Logger) (policy.Options, error) {
	o := policy.Options{
		BundleURL:    v.GetString("policy-bundle-url"),
		KeyID:        v.GetString("policy-key-id"),
		KeyAlgorithm: v.GetString("policy-key-algorithm"),
		MinDelay:     v.GetDuration("policy-min-delay"),
		MaxDelay:     v.GetDuration("policy-max-delay"),
		PersistDir:   policyPersistDir(v),
		Logger:       log,
	}
	if path := v.GetString("policy-public-key"); path != "" {
		key, err := os.ReadFile(path)
		if err != nil {
			return o, fmt.Errorf("policy-public-key: %w", err)
		}
		o.PublicKeyPEM = key
	}
	return o, nil
}

func policyPersistDir(v *viper.Viper) string {
	if d := v.GetString("policy-persist-dir"); d != "" {
		return d
	}
	if d := v.GetString("data-dir"); d != "" {
		return filepath.Join(d, "policy")
	}
	return ""
}
