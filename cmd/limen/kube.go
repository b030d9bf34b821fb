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
	var app, style string
	cmd := &cobra.Command{
		Use:   "login CLUSTER [--app NAME] [--server-url-style server-name|path|dns]",
		Short: "Write a kubeconfig for CLUSTER whose only credential is the limen plugin, and print the export line",
		Long: `Write a separate JSON kubeconfig for CLUSTER in the profile directory,
whose only credential is the exec plugin "limen kube credentials". Use it
with the printed export line, or merge it with your own as
KUBECONFIG=yours:this.

--server-url-style says how the kubeconfig names CLUSTER to the proxy
at HOST:PORT (the address you logged in to):

  server-name  (the default) the server is https://HOST:PORT with no path
               and tls-server-name is CLUSTER.kube.HOST; the proxy routes
               by that name, so kubectl get --raw and kubectl proxy work,
               and no DNS record is needed. For kubectl, client-go, Helm
               and the JavaScript client (@kubernetes/client-node).
  path         the server is https://HOST:PORT/k8s/CLUSTER, without
               tls-server-name: for clients that ignore tls-server-name,
               such as the Python client. Commands that drop the server
               URL's path (kubectl get --raw, kubectl proxy) do not reach
               the cluster with it. The only style for an IPv6 address.
  dns          the server is https://CLUSTER.kube.HOST:PORT: for operators
               whose wildcard DNS name *.kube.HOST points at the proxy
               (its serving certificate already covers it). Every client
               sends that name, since it is the URL's host; HOST must be a
               DNS name, not an IP address.

The default style writes kubeconfig-CLUSTER.json; the others write
kubeconfig-CLUSTER.STYLE.json beside it, so that each can be kept.

With --app NAME the kubeconfig's credential is bound to the application
client NAME, registered in policy: the plugin exchanges your login
certificate for a short-lived one for NAME, and requests made with it get
NAME's groups, user name and scope, never the command line's.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			urlStyle, err := profile.ParseServerURLStyle(style)
			if err != nil {
				return fmt.Errorf("--server-url-style: %w", err)
			}
			p, err := commandProfile(cmd)
			if err != nil {
				return err
			}
			if _, _, err := profile.ClusterServer(p.Proxy, args[0], urlStyle); err != nil {
				return fmt.Errorf("--server-url-style %s: %w", urlStyle, err)
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
			path, err := p.WriteKubeconfig(args[0], urlStyle, plugin)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "export KUBECONFIG=%s\n", path)
			return nil
		},
	}
	cmd.Flags().StringVar(&app, "app", "", "bind the credential to this application client, registered in policy")
	cmd.Flags().StringVar(&style, "server-url-style", string(profile.StyleServerName),
		"how the kubeconfig names the cluster: server-name (https://HOST:PORT and tls-server-name CLUSTER.kube.HOST), "+
			"path (https://HOST:PORT/k8s/CLUSTER, for clients that ignore tls-server-name, such as the Python client) or "+
			"dns (https://CLUSTER.kube.HOST:PORT, with a wildcard DNS name)")
	return cmd
}

func newKubeCredentialsCmd() *cobra.Command {
	var app string
	cmd := &cobra.Command{
		Use:   "credentials",
		Short: "kubectl exec credential plugin: print the stored certificate as an ExecCredential",
		Long: `Print the stored certificate and key as a client.authentication.k8s.io/v1
ExecCredential for kubectl. It never prompts: with no valid certificate it
exits non-zero and says to run limen login.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := commandProfile(cmd)
			if err != nil {
				return err
			}
			var creds *profile.Credentials
			if app != "" {
				creds, err = p.AppCredentials(cmd.Context(), app, time.Now())
			} else {
				creds, err = pluginCredentials(cmd.Context(), p, time.Now())
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
