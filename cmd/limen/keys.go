package main

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/limenhq/limen/gateway/ca"
)

// newProxyKeysCmd is `limen proxy keys`: the key material several proxies
// share (docs/KEYS.md).
func newProxyKeysCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Manage the CA and grant-signing keys that several proxies share",
		Long: `Several proxies on one database must share one CA and one grant-signing
key, which never go into the database: limen proxy keys init writes them
into a directory that every proxy mounts as --ca-dir. docs/KEYS.md says how
to rotate each key.`,
	}
	initCmd := &cobra.Command{
		Use:   "init",
		Short: "Write the shared CA (root, user and worker issuers) and grant-signing key into --ca-dir",
		Long: `Write the key material every proxy of one deployment must share into
--ca-dir: the root CA (or the operator's, with --ca-cert and --ca-key), the
user and worker certificate issuers and the grant-signing key. Files already
there are kept; issuers near their end are renewed. The keys never go into
the database. Make the directory a Secret and mount it on every proxy as
--ca-dir:

  limen proxy keys init --ca-dir ./limen-ca
  kubectl create secret generic limen-ca --from-file=./limen-ca

Rotation is described in docs/KEYS.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			dir := v.GetString("ca-dir")
			if dir == "" {
				return errors.New("ca-dir: required; the directory to write the shared keys into")
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			fp, err := ca.InitKeys(dir, ca.Options{CACertFile: v.GetString("ca-cert"), CAKeyFile: v.GetString("ca-key"), Logger: log})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Shared keys in %s\nCA fingerprint: %s\n", dir, fp)
			return nil
		},
	}
	f := initCmd.Flags()
	f.String("ca-dir", "", "directory for the shared keys (required)")
	f.String("ca-cert", "", "operator-provided root CA certificate (PEM); default: generated")
	f.String("ca-key", "", "key of --ca-cert (PEM)")
	cmd.AddCommand(initCmd)
	return cmd
}
