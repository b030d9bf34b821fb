package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/limenhq/limen/gateway/authapi"
	"github.com/limenhq/limen/gateway/enroll"
)

func newTokensCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tokens",
		Short: "Manage one-time worker join tokens (admin)",
		Long: `A join token enrolls one worker for one cluster: limen worker --join-token
exchanges it for a worker certificate, pinning the proxy CA fingerprint the
token carries. A token works once and expires after --ttl. Minting one is
an administrator's matter: a worker receives grants and exec input for its
cluster.`,
	}
	cmd.PersistentFlags().String("proxy", "", "proxy HOST:PORT (default: the last one logged in to)")
	create := &cobra.Command{
		Use:   "create",
		Short: "Create a single-use join token for a cluster's worker; the token is printed once",
		Long: `Create a join token for --cluster, print it once on standard output and,
on standard error, the limen worker command that uses it. Needs the admin
action tokens.create; the token is stored only hashed, and audited.`,
		Example: `  limen tokens create --cluster prod --ttl 15m`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			if v.GetString("cluster") == "" {
				return fmt.Errorf("cluster: required; pass --cluster NAME")
			}
			ttl := v.GetDuration("ttl")
			if ttl < time.Minute || ttl > enroll.MaxTokenTTL {
				return fmt.Errorf("ttl %s: must be between 1m and %s", ttl, enroll.MaxTokenTTL)
			}
			c, err := adminClient(v.GetString("proxy"))
			if err != nil {
				return err
			}
			resp, err := c.CreateToken(cmd.Context(), authapi.TokenRequest{Cluster: v.GetString("cluster"), TTL: ttl.String()})
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), resp.Token)
			fmt.Fprintf(cmd.ErrOrStderr(), "Token %s for cluster %s, single use, expires %s.\nStart the worker with: limen worker --proxy %s --kube-cluster %s --join-token TOKEN --data-dir DIR\n",
				resp.Info.ID, resp.Info.Cluster, resp.Info.Expires.Local().Format(time.RFC1123), c.Proxy, resp.Info.Cluster)
			return nil
		},
	}
	create.Flags().String("cluster", "", "cluster the token enrolls a worker for (required)")
	create.Flags().Duration("ttl", enroll.DefaultTokenTTL, "how long the token stays valid")
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List join tokens (never their secrets)",
		Long: `List the join tokens with their cluster, creator, expiry and when each was
used, if it was.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			c, err := adminClient(v.GetString("proxy"))
			if err != nil {
				return err
			}
			list, err := c.ListTokens(cmd.Context())
			if err != nil {
				return err
			}
			if v.GetBool("json") {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(list)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tCLUSTER\tCREATOR\tEXPIRES\tUSED")
			for _, t := range list {
				used := "no"
				if t.Used != nil {
					used = t.Used.Local().Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.ID, t.Cluster, t.Creator, t.Expires.Local().Format(time.RFC3339), used)
			}
			return tw.Flush()
		},
	}
	ls.Flags().Bool("json", false, "print JSON")
	cmd.AddCommand(create, ls)
	return cmd
}
