package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/limenhq/limen/gateway/authapi"
	"github.com/limenhq/limen/gateway/profile"
)

func newKubeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kube",
		Short: "Kubernetes access through Limen: list clusters, write kubeconfigs, the kubectl credential plugin",
	}
	cmd.PersistentFlags().String("proxy", "", "proxy HOST:PORT (default: the last one logged in to)")
	cmd.AddCommand(newKubeLsCmd(), newKubeLoginCmd(), newKubeCredentialsCmd(), newKubeAccessCmd())
	return cmd
}

func newKubeLsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List the clusters policy lets you reach and whether a worker is connected for each",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			c, err := adminClient(v.GetString("proxy"))
			if err != nil {
				return err
			}
			list, err := c.Clusters(cmd.Context())
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "CLUSTER\tWORKER")
			for _, cl := range list {
				state := "not connected"
				if cl.Connected {
					state = "connected"
				}
				fmt.Fprintf(tw, "%s\t%s\n", cl.Name, state)
			}
			return tw.Flush()
		},
	}
}

func newKubeLoginCmd() *cobra.Command {
	var app string
	cmd := &cobra.Command{
		Use:   "login CLUSTER [--app NAME]",
		Short: "Write a kubeconfig for CLUSTER whose only credential is the limen plugin, and print the export line",
		Long: `Write a separate JSON kubeconfig for CLUSTER in the profile directory. Its
server is https://HOST:PORT with no path, its tls-server-name is
CLUSTER.kube.HOST (the proxy routes by that name, so kubectl get --raw and
kubectl proxy work; no DNS record is needed), and its only credential is
the exec plugin "limen kube credentials". Use it with the printed export
line, or merge it with your own as KUBECONFIG=yours:this. Kubeconfigs
written before, with the server https://HOST:PORT/k8s/CLUSTER, keep
working except for commands that drop the path.

With --app NAME the kubeconfig's credential is bound to the application
client NAME, registered in policy: the plugin exchanges your login
certificate for a short-lived one for NAME, and requests made with it get
NAME's groups, user name and scope, never the command line's.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := commandProfile(cmd)
			if err != nil {
				return err
			}
			creds, err := p.Credentials(time.Now())
			if err != nil {
				return err
			}
			if c, err := p.Client(creds); err == nil {
				if list, err := c.Clusters(cmd.Context()); err == nil && !slices.ContainsFunc(list, func(c2 authapi.Cluster) bool { return c2.Name == args[0] }) {
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: policy does not list cluster %s for you; requests will be refused (see limen kube ls)\n", args[0])
				}
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find the limen binary for the kubeconfig: %w", err)
			}
			if exe, err = filepath.EvalSymlinks(exe); err != nil {
				return fmt.Errorf("find the limen binary for the kubeconfig: %w", err)
			}
			plugin := profile.Plugin{Command: exe, App: app}
			if app != "" {
				// Fail now, not at kubectl's first request, if the proxy
				// will not issue the application's certificate.
				if _, err := p.AppCredentials(cmd.Context(), app, time.Now()); err != nil {
					return err
				}
			}
			if h := os.Getenv("LIMEN_HOME"); h != "" {
				plugin.Env = map[string]string{"LIMEN_HOME": h}
			}
			path, err := p.WriteKubeconfig(args[0], plugin)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "export KUBECONFIG=%s\n", path)
			return nil
		},
	}
	cmd.Flags().StringVar(&app, "app", "", "bind the credential to this application client, registered in policy")
	return cmd
}

func newKubeCredentialsCmd() *cobra.Command {
	var app string
	cmd := &cobra.Command{
		Use:   "credentials",
		Short: "kubectl exec credential plugin: print the stored certificate as an ExecCredential",
		Long: `Print the stored certificate and key as a client.authentication.k8s.io/v1
ExecCredential for kubectl. It never prompts: with no valid certificate it
exits non-zero and says to run limen login.

When access requests were made from this profile (limen request), it
prints instead a certificate the proxy issues against your login that
carries the approved ones, asking the proxy again while one is pending
or has expired (docs/ACCESS-REQUESTS.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := commandProfile(cmd)
			if err != nil {
				return err
			}
			var creds *profile.Credentials
			if app != "" {
				creds, err = p.AppCredentials(cmd.Context(), app, time.Now())
			} else if creds, err = pluginCredentials(cmd.Context(), p, time.Now()); err == nil {
				// With access requests made from this profile, the
				// certificate that carries the approved ones.
				creds, err = p.ElevatedCredentials(cmd.Context(), creds, time.Now(), func(msg string) { fmt.Fprintln(cmd.ErrOrStderr(), msg) })
			}
			if err != nil {
				return err
			}
			out, err := creds.ExecCredential()
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n", out)
			return err
		},
	}
	cmd.Flags().StringVar(&app, "app", "", "print the certificate bound to this application client (limen kube login --app)")
	return cmd
}
