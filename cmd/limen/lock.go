package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/limenhq/limen/gateway/adminapi"
	"github.com/limenhq/limen/gateway/locks"
)

// sessionAdminClient is the session-control API client for the profile of
// proxy (the last one logged in to when empty).
func sessionAdminClient(proxy string) (*adminapi.Client, error) {
	c, err := adminClient(proxy)
	if err != nil {
		return nil, err
	}
	return adminapi.NewClient(c), nil
}

func newLockCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lock USER",
		Short: "Lock a user or bot (bot:NAME): refuse their requests and end their open sessions (admin)",
		Long: `Lock a user or bot. Every new request is refused with the reason, and every
open exec, attach, port-forward, watch and log stream ends within a second,
on the proxy and on the workers. The lock lasts until limen unlock, or for
--ttl.

With --local --data-dir DIR, on the proxy host, the lock is written straight
to the proxy's lock store, with no certificate and no policy check, and
audited as set by the host's OS user; a running proxy puts it in force
within a second.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			t, err := locks.ParseTarget(args[0])
			if err != nil {
				return err
			}
			reason := strings.TrimSpace(v.GetString("reason"))
			if reason == "" {
				return fmt.Errorf("reason: required; pass --reason TEXT (the locked user sees it)")
			}
			req := adminapi.LockRequest{Target: t, Reason: reason}
			if ttl := v.GetDuration("ttl"); ttl != 0 {
				if ttl < adminapi.MinTTL {
					return fmt.Errorf("ttl %s: must be at least %s, or 0 for a lock until unlock", ttl, adminapi.MinTTL)
				}
				req.TTL = ttl.String()
			}
			var l locks.Lock
			if v.GetBool("local") {
				ll, err := openLocalLocksFlags(cmd, v)
				if err != nil {
					return err
				}
				defer ll.close()
				l, err = ll.Lock(cmd.Context(), req)
				if err != nil {
					return err
				}
			} else {
				c, err := sessionAdminClient(v.GetString("proxy"))
				if err != nil {
					return err
				}
				if l, err = c.Lock(cmd.Context(), req); err != nil {
					return err
				}
			}
			fmt.Fprintln(cmd.OutOrStdout(), "Locked: "+l.Describe())
			return nil
		},
	}
	cmd.Flags().String("proxy", "", "proxy HOST:PORT (default: the last one logged in to)")
	cmd.Flags().String("reason", "", "why; shown to the locked user and audited (required)")
	cmd.Flags().Duration("ttl", 0, "lift the lock after this long (default: until limen unlock)")
	addLocalFlags(cmd)
	return cmd
}

// addLocalFlags adds --local, --data-dir and the database flags to an
// admin command.
func addLocalFlags(cmd *cobra.Command) {
	cmd.Flags().Bool("local", false, "on the proxy host: change the proxy's stores (in --data-dir, or the --database-url database) directly, with no certificate or policy check (audited as the OS user)")
	cmd.Flags().String("data-dir", "", "the proxy's data directory, with --local")
	addDatabaseFlags(cmd.Flags())
}

func openLocalLocksFlags(cmd *cobra.Command, v *viper.Viper) (*localLocks, error) {
	return openLocalLocks(cmd.Context(), v)
}

func newUnlockCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "unlock USER",
		Short: "Remove the lock on a user or bot (bot:NAME) (admin)",
		Long: `Remove the lock on a user or bot (bot:NAME). A locked admin cannot unlock
themself, or do anything else, through the proxy.

The break-glass, when every admin is locked out: on the proxy host, as a user
who can write its data directory,

  limen unlock alice --local --data-dir /var/lib/limen

removes the lock straight from the proxy's lock store, with no certificate
and no policy check. The unlock is audited (user.unlock, via=local, by the
host's OS user); if it cannot be audited the lock is put back. A running
proxy lifts the lock, on itself and its workers, within a second.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			t, err := locks.ParseTarget(args[0])
			if err != nil {
				return err
			}
			if v.GetBool("local") {
				ll, err := openLocalLocksFlags(cmd, v)
				if err != nil {
					return err
				}
				defer ll.close()
				if _, err := ll.Unlock(cmd.Context(), t); err != nil {
					return err
				}
			} else {
				c, err := sessionAdminClient(v.GetString("proxy"))
				if err != nil {
					return err
				}
				if _, err := c.Unlock(cmd.Context(), t); err != nil {
					return err
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Unlocked %s.\n", t)
			return nil
		},
	}
	cmd.Flags().String("proxy", "", "proxy HOST:PORT (default: the last one logged in to)")
	addLocalFlags(cmd)
	return cmd
}

func newLocksCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "locks",
		Short: "Show locks on users and bots (admin)",
		Long: `Show the locks in force: who is locked, why, by whom, since and until
when. Set and lift them with limen lock and limen unlock.`,
	}
	cmd.PersistentFlags().String("proxy", "", "proxy HOST:PORT (default: the last one logged in to)")
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the locks in force",
		Long: `List the locks in force through the proxy's admin API (the admin action
locks.list), or, with --local --data-dir DIR on the proxy host, straight
from the proxy's lock store.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			var list []locks.Lock
			if v.GetBool("local") {
				ll, err := openLocalLocksFlags(cmd, v)
				if err != nil {
					return err
				}
				defer ll.close()
				if list, err = ll.store.List(cmd.Context(), time.Now()); err != nil {
					return err
				}
			} else {
				c, err := sessionAdminClient(v.GetString("proxy"))
				if err != nil {
					return err
				}
				if list, err = c.Locks(cmd.Context()); err != nil {
					return err
				}
			}
			if v.GetBool("json") {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(list)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TARGET\tREASON\tBY\tSINCE\tUNTIL")
			for _, l := range list {
				until := "unlock"
				if !l.Expires.IsZero() {
					until = l.Expires.Local().Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s:%s\t%s\t%s\t%s\t%s\n", l.Target.Kind, l.Target.Name, l.Reason, l.CreatedBy,
					l.CreatedAt.Local().Format(time.RFC3339), until)
			}
			return tw.Flush()
		},
	}
	ls.Flags().Bool("json", false, "print JSON")
	addLocalFlags(ls)
	cmd.AddCommand(ls)
	return cmd
}
