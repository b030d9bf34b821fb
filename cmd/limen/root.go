package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
)

// newRootCmd builds the command tree. Every subcommand is constructed here so
// that nothing registers itself through init().
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "limen",
		Short: "Limen: a Kubernetes access gateway with OPA policy, impersonation, recording and audit",
		Long: `Limen lets people and CI jobs use kubectl unchanged against many clusters.
A proxy authenticates users with short-lived client certificates and asks an
OPA/Rego policy which Kubernetes groups they may assume; a worker next to each
cluster re-checks that grant, impersonates, records exec and attach sessions
and audits every request. The proxy also serves a web console.

One binary for every part: limen proxy and limen worker run the two halves;
limen login, limen kube login and limen status are for people and CI jobs;
users, bots, tokens, lock, sessions, audit, recordings, play and policy are
for administrators and operators; limen doctor says what is wrong with a
setup and what to do.

Configuration comes from flags, LIMEN_* environment variables (LIMEN_DATA_DIR
for --data-dir, and so on) and an optional YAML file (--config), in that order
of precedence.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().String("config", "", "YAML configuration file (keys are the flag names)")

	root.AddCommand(
		newVersionCmd(),
		newAuditCmd(),
		newProxyCmd(), newWorkerCmd(), newLoginCmd(), newLogoutCmd(), newStatusCmd(),
		newUsersCmd(), newBotsCmd(), newKubeCmd(), newTokensCmd(), newDoctorCmd(),
		newLockCmd(), newUnlockCmd(), newLocksCmd(), newSessionsCmd(),
		newPolicyCmd(),
		newRecordingsCmd(), newPlayCmd(),
		newRequestCmd(), newRequestsCmd(),
	)
	return root
}

// loadConfig returns a viper instance that layers flags over LIMEN_* env over
// the YAML file named by --config. Keys are flag names; a dash in a key is an
// underscore in its environment variable.
func loadConfig(cmd *cobra.Command) (*viper.Viper, error) {
	v := viper.New()
	v.SetEnvPrefix("LIMEN")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	if err := v.BindPFlags(cmd.Flags()); err != nil {
		return nil, fmt.Errorf("bind flags: %w", err)
	}
	path, _ := cmd.Flags().GetString("config")
	if path == "" {
		path = os.Getenv("LIMEN_CONFIG")
	}
	if path != "" {
		v.SetConfigFile(path)
		v.SetConfigType("yaml")
		if err := v.ReadInConfig(); err != nil {
			var notFound viper.ConfigFileNotFoundError
			if errors.As(err, &notFound) || os.IsNotExist(err) {
				return nil, fmt.Errorf("config file %s does not exist: create it or drop --config", path)
			}
			return nil, fmt.Errorf("read config file %s: %w", path, err)
		}
	}
	return v, nil
}
