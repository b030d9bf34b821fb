package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/limenhq/limen/gateway/authapi"
	"github.com/limenhq/limen/gateway/bots"
)

func newBotsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bots",
		Short: "Manage bots, the identities of CI jobs and other automation (admin)",
		Long: `Bots are principals of kind bot (bot:NAME), distinct from users of the same
name all the way to the cluster. A bot logs in with a join secret
(limen bots token, then limen login --bot NAME --token-file F) or, keyless,
with an ID token from a CI issuer the proxy trusts (--ci-issuer) whose
claims policy matches to the bot (data.limen.bots.oidc_login).`,
	}
	cmd.PersistentFlags().String("proxy", "", "proxy HOST:PORT (default: the last one logged in to)")
	add := &cobra.Command{
		Use:   "add NAME",
		Short: "Create a bot with traits",
		Long: `Create the bot NAME with the traits policy decides on (--trait KEY=VALUE,
repeatable). The bot cannot log in until it has a join secret (limen bots
token) or policy data matches CI tokens to it (keyless). Needs the admin
action bots.add; a bot with traits is an administrator's matter, since
traits bind roles.`,
		Example: `  limen bots add ci-deployer --trait team=release`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			traits, err := parseTraits(v.GetStringSlice("trait"))
			if err != nil {
				return err
			}
			c, err := adminClient(v.GetString("proxy"))
			if err != nil {
				return err
			}
			if err := c.AddBot(cmd.Context(), authapi.BotRequest{Name: args[0], Traits: traits}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Bot %s added.\n", args[0])
			return nil
		},
	}
	add.Flags().StringSlice("trait", nil, "KEY=VALUE trait policy decides on (repeatable)")
	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a bot and all its join secrets",
		Long: `Remove the bot NAME. Its join secrets stop logging it in at once; a
certificate it already holds stays valid until it expires (lock it with
limen lock bot:NAME to end that too).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			c, err := adminClient(v.GetString("proxy"))
			if err != nil {
				return err
			}
			if err := c.RemoveBot(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Bot %s removed; its join secrets no longer log in.\n", args[0])
			return nil
		},
	}
	token := &cobra.Command{
		Use:   "token NAME",
		Short: "Make a join secret for a bot; it is printed once and stored only hashed",
		Long: `Make a join secret that logs the bot NAME in (limen login --bot NAME
--token-file FILE). The secret is printed once on standard output, stored
only as its SHA-256, and audited; it works for --ttl and, with --uses, for
that many logins (renewals by the kubectl plugin included).`,
		Example: `  limen bots token ci-deployer --ttl 24h --uses 100 > secret`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			ttl, uses := v.GetDuration("ttl"), v.GetInt("uses")
			if ttl <= 0 || ttl > bots.MaxTTL {
				return fmt.Errorf("ttl %s: must be positive and at most %s", ttl, bots.MaxTTL)
			}
			if uses < 0 {
				return fmt.Errorf("uses %d: must be 0 (unlimited until expiry) or more", uses)
			}
			c, err := adminClient(v.GetString("proxy"))
			if err != nil {
				return err
			}
			resp, err := c.BotToken(cmd.Context(), args[0], authapi.BotTokenRequest{TTL: ttl.String(), Uses: uses})
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), resp.Token)
			limit := "unlimited logins"
			if uses > 0 {
				limit = fmt.Sprintf("%d logins", uses)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "Join secret %s for bot %s: %s until %s.\nIn CI: limen login --proxy %s --bot %s --token-file FILE, then limen kube login CLUSTER.\n",
				resp.Info.ID, args[0], limit, resp.Info.Expires.Local().Format(time.RFC1123), c.Proxy, args[0])
			return nil
		},
	}
	token.Flags().Duration("ttl", time.Hour, "how long the secret logs the bot in")
	token.Flags().Int("uses", 0, "how many logins (renewals included) the secret allows; 0: unlimited until it expires")
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List bots with their traits",
		Long: `List every bot with its traits and when it was created (never its
secrets). Needs the admin action bots.list.`,
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
			list, err := c.ListBots(cmd.Context())
			if err != nil {
				return err
			}
			if v.GetBool("json") {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(list)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tTRAITS\tCREATED")
			for _, b := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", b.Name, formatTraitMap(b.Traits), b.Created.Local().Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	ls.Flags().Bool("json", false, "print JSON")
	cmd.AddCommand(add, rm, token, ls)
	return cmd
}
