package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/limenhq/limen/gateway/sessions"
)

func newSessionsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sessions",
		Short: "Show and end live sessions: exec, attach, port-forward, watch, logs, proxy (admin)",
		Long: `Show the streams open through the proxy, and those that ended recently,
and end one of them. To end every session of a person and refuse their next
request, use limen lock instead.`,
	}
	cmd.PersistentFlags().String("proxy", "", "proxy HOST:PORT (default: the last one logged in to)")
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List live sessions, then recently ended ones",
		Long: `List the sessions (exec, attach, port-forward, watch, logs -f, proxy) the
proxy relays: who, on which cluster and pod, since when, the bytes each
way, and live or how it ended. Needs the admin action sessions.list.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			c, err := sessionAdminClient(v.GetString("proxy"))
			if err != nil {
				return err
			}
			list, err := c.Sessions(cmd.Context())
			if err != nil {
				return err
			}
			if v.GetBool("json") {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(list)
			}
			return printSessions(cmd, list)
		},
	}
	ls.Flags().Bool("json", false, "print JSON")
	kill := &cobra.Command{
		Use:   "kill ID",
		Short: "End one session on the proxy and its worker; the user's other sessions go on",
		Long: `End the session ID (from limen sessions ls) on the proxy and on its
worker, within a second; kubectl prints "session ended: killed by an
administrator", and its session.end says killed. Needs the admin action session.kill.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			if err := sessions.ValidID(args[0]); err != nil {
				return err
			}
			c, err := sessionAdminClient(v.GetString("proxy"))
			if err != nil {
				return err
			}
			info, err := c.Kill(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			switch {
			case info.Live():
				// Another proxy relays it and had not confirmed in time.
				fmt.Fprintf(cmd.OutOrStdout(), "Asked proxy %s to kill session %s (%s %s on %s, %s); it has not confirmed yet: check with limen sessions ls.\n",
					info.Proxy, info.ID, info.Principal, info.Kind, info.Cluster, info.Target)
			case info.Proxy != "":
				fmt.Fprintf(cmd.OutOrStdout(), "Killed session %s (%s %s on %s, %s) at proxy %s.\n",
					info.ID, info.Principal, info.Kind, info.Cluster, info.Target, info.Proxy)
			default:
				fmt.Fprintf(cmd.OutOrStdout(), "Killed session %s (%s %s on %s, %s).\n",
					info.ID, info.Principal, info.Kind, info.Cluster, info.Target)
			}
			return nil
		},
	}
	cmd.AddCommand(ls, kill)
	return cmd
}

func printSessions(cmd *cobra.Command, list []sessions.Info) error {
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tUSER\tCLUSTER\tKIND\tTARGET\tSTART\tIN\tOUT\tSTATE")
	for _, s := range list {
		state := "live"
		if !s.Live() {
			state = fmt.Sprintf("%s after %s", s.Reason, s.End.Sub(s.Start).Round(time.Second))
		}
		if s.Proxy != "" {
			state += " (via " + s.Proxy + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", s.ID, s.Principal, s.Cluster, s.Kind, s.Target,
			s.Start.Local().Format(time.RFC3339), s.BytesIn, s.BytesOut, state)
	}
	return tw.Flush()
}
