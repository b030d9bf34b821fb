package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/authapi"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/store"
	"github.com/limenhq/limen/gateway/users"
)

func newUsersCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "users",
		Short: "Manage local users (admin; --local writes the proxy's store directly)",
		Long: `Manage Limen's local users. By default the commands call the proxy's admin
API with your certificate, and policy (data.limen.admin.allow) decides.

With --local --data-dir DIR they open the user store on the proxy host
directly, with no certificate and no policy check: this is how the first
administrator is made:

  limen users add alice --local --data-dir /var/lib/limen --trait groups=admins

Changes made with --local are audited in the proxy's audit store like the
admin API's, by the host's OS user with via=local.`,
	}
	pf := cmd.PersistentFlags()
	pf.String("proxy", "", "proxy HOST:PORT (default: the last one logged in to)")
	pf.Bool("local", false, "open the user store (in --data-dir, or the --database-url database) directly (on the proxy host)")
	pf.String("data-dir", "", "the proxy's data directory, with --local")
	addDatabaseFlags(pf)
	cmd.AddCommand(newUsersAddCmd(), newUsersRmCmd(), newUsersLsCmd(), newUsersPasswdCmd())
	return cmd
}

// userBackend is the local store or the admin API.
type userBackend interface {
	add(ctx context.Context, name, pw string, traits map[string][]string) error
	remove(ctx context.Context, name string) error
	passwd(ctx context.Context, name, pw string) error
	list(ctx context.Context) ([]users.User, error)
	close()
}

// localUsers changes the user store directly and audits each change.
type localUsers struct {
	s       *users.Store
	audit   *audit.Store
	backend store.Backend
	by      identity.Principal
	// fields say the change came from the proxy host (localActor).
	fields map[string]string
}

func (l localUsers) add(ctx context.Context, n, pw string, t map[string][]string) error {
	return l.audited(ctx, audit.TypeUserAdd, n, l.s.Add(ctx, n, pw, t))
}
func (l localUsers) remove(ctx context.Context, n string) error {
	return l.audited(ctx, audit.TypeUserRemove, n, l.s.Remove(ctx, n))
}
func (l localUsers) passwd(ctx context.Context, n, pw string) error {
	return l.audited(ctx, audit.TypeUserPasswd, n, l.s.SetPassword(ctx, n, pw))
}
func (l localUsers) list(ctx context.Context) ([]users.User, error) { return l.s.List(ctx) }
func (l localUsers) close()                                         { l.s.Close(); l.audit.Close(); l.backend.Close() }

func openLocalUsers(ctx context.Context, b store.Backend) (localUsers, error) {
	udb, err := b.Users(ctx)
	if err != nil {
		return localUsers{}, err
	}
	s, err := users.New(udb, users.Options{})
	if err != nil {
		return localUsers{}, err
	}
	as, err := openLocalAudit(ctx, b)
	if err != nil {
		return localUsers{}, err
	}
	by, fields := localActor()
	return localUsers{s: s, audit: as, by: by, fields: fields, backend: b}, nil
}

// audited records a change and its outcome, as the admin API does: a
// change that failed is recorded with its error, and one that was made but
// not recorded is reported as such.
func (l localUsers) audited(ctx context.Context, typ audit.Type, name string, err error) error {
	fields := map[string]string{"user": name}
	for k, v := range l.fields {
		fields[k] = v
	}
	if err != nil {
		fields["error"] = err.Error()
	}
	aerr := l.audit.Emit(ctx, audit.Event{Type: typ, Time: time.Now(), Principal: l.by, Fields: fields})
	switch {
	case err != nil:
		return err
	case aerr != nil:
		return fmt.Errorf("the change is made, but the audit trail did not record it: %w", aerr)
	}
	return nil
}

type remoteUsers struct{ c *authapi.Client }

func (r remoteUsers) add(ctx context.Context, n, pw string, t map[string][]string) error {
	return r.c.AddUser(ctx, authapi.UserRequest{Name: n, Password: pw, Traits: t})
}
func (r remoteUsers) remove(ctx context.Context, n string) error { return r.c.RemoveUser(ctx, n) }
func (r remoteUsers) passwd(ctx context.Context, n, pw string) error {
	return r.c.SetPassword(ctx, n, pw)
}
func (r remoteUsers) list(ctx context.Context) ([]users.User, error) { return r.c.ListUsers(ctx) }
func (r remoteUsers) close()                                         {}

func openUsers(cmd *cobra.Command) (userBackend, *viper.Viper, error) {
	v, err := loadConfig(cmd)
	if err != nil {
		return nil, nil, err
	}
	if v.GetBool("local") {
		if v.GetString("database-url") == "" {
			dir, err := localDataDir(v)
			if err != nil {
				return nil, nil, err
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, nil, fmt.Errorf("data-dir: %w", err)
			}
		}
		b, _, err := localBackend(cmd.Context(), v)
		if err != nil {
			return nil, nil, err
		}
		l, err := openLocalUsers(cmd.Context(), b)
		if err != nil {
			b.Close()
			return nil, nil, err
		}
		return l, v, nil
	}
	c, err := adminClient(v.GetString("proxy"))
	if err != nil {
		return nil, nil, err
	}
	return remoteUsers{c}, v, nil
}

// adminClient is an API client presenting the stored certificate.
func adminClient(proxy string) (*authapi.Client, error) {
	p, _, err := openProfile(proxy)
	if err != nil {
		return nil, err
	}
	creds, err := p.Credentials(time.Now())
	if err != nil {
		return nil, err
	}
	return p.Client(creds)
}

// parseTraits turns repeated KEY=VALUE flags into traits.
func parseTraits(flags []string) (map[string][]string, error) {
	if len(flags) == 0 {
		return nil, nil
	}
	t := map[string][]string{}
	for _, f := range flags {
		k, val, ok := strings.Cut(f, "=")
		if !ok || k == "" || val == "" {
			return nil, fmt.Errorf("trait %q: want KEY=VALUE, for example groups=admins", f)
		}
		t[k] = append(t[k], val)
	}
	return t, nil
}

func newUsersAddCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "add NAME",
		Short: "Create a local user with a password and traits",
		Long: `Create the local user NAME with a password (asked for, or the first line
of standard input with --password-stdin) and the traits policy decides on
(--trait KEY=VALUE, repeatable). Traits bind roles: under the default policy
groups=admins makes an administrator.`,
		Example: `  limen users add alice --trait groups=dev
  limen users add admin --local --data-dir /var/lib/limen --trait groups=admins --password-stdin < pw`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, v, err := openUsers(cmd)
			if err != nil {
				return err
			}
			defer b.close()
			traits, err := parseTraits(v.GetStringSlice("trait"))
			if err != nil {
				return err
			}
			pw, err := readPassword(cmd, v.GetBool("password-stdin"), "Password for "+args[0]+": ", true)
			if err != nil {
				return err
			}
			if err := b.add(cmd.Context(), args[0], pw, traits); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Added user %s.\n", args[0])
			return nil
		},
	}
	cmd.Flags().StringSlice("trait", nil, "trait KEY=VALUE, repeatable (groups=admins makes an administrator under the default policy)")
	cmd.Flags().Bool("password-stdin", false, "read the password from the first line of standard input")
	return cmd
}

func newUsersRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME",
		Short: "Delete a local user (certificates already issued stay valid until they expire)",
		Long: `Delete the local user NAME: they can no longer log in. A certificate they
already hold stays valid until it expires; lock them (limen lock NAME) to
refuse it and end their sessions at once.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, _, err := openUsers(cmd)
			if err != nil {
				return err
			}
			defer b.close()
			if err := b.remove(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Removed user %s.\n", args[0])
			return nil
		},
	}
}

func newUsersPasswdCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "passwd NAME",
		Short: "Set a local user's password",
		Long: `Set the password of the local user NAME (asked for, or the first line of
standard input with --password-stdin). Changing another user's password is
taking over their login, so it is an administrator's action (users.passwd).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, v, err := openUsers(cmd)
			if err != nil {
				return err
			}
			defer b.close()
			pw, err := readPassword(cmd, v.GetBool("password-stdin"), "New password for "+args[0]+": ", true)
			if err != nil {
				return err
			}
			if err := b.passwd(cmd.Context(), args[0], pw); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Password of %s changed.\n", args[0])
			return nil
		},
	}
	cmd.Flags().Bool("password-stdin", false, "read the password from the first line of standard input")
	return cmd
}

func newUsersLsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List local users with their traits",
		Long: `List the local users with their traits and the day each was created
(never a password).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, v, err := openUsers(cmd)
			if err != nil {
				return err
			}
			defer b.close()
			list, err := b.list(cmd.Context())
			if err != nil {
				return err
			}
			if v.GetBool("json") {
				if list == nil {
					list = []users.User{}
				}
				return json.NewEncoder(cmd.OutOrStdout()).Encode(list)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tTRAITS\tCREATED")
			for _, u := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", u.Name, formatTraitMap(u.Traits), u.Created.Format(time.DateOnly))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().Bool("json", false, "print JSON")
	return cmd
}
