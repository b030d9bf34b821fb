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
	f.String("policy-bundle-ca", "", "PEM file of the CA certificates the bundle server's certificate must chain to (default: the system roots)")
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
	ca, err := bundleCA(v)
	if err != nil {
		return o, err
	}
	o.BundleCAPEM = ca
	// Refuse a bad policy configuration (an http:// bundle URL, a key that
	// does not parse) at start, before the proxy opens its CA or the worker
	// enrolls. Validate fills in a client, so it checks a copy: New
	// validates o again and builds its own.
	check := o
	if err := check.Validate(); err != nil {
		return o, fmt.Errorf("policy configuration: %w", err)
	}
	return o, nil
}

// bundleCA reads policy-bundle-ca, if set.
func bundleCA(v *viper.Viper) ([]byte, error) {
	path := v.GetString("policy-bundle-ca")
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policy-bundle-ca: %w", err)
	}
	return b, nil
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
