package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/limenhq/limen/gateway/authapi"
	"github.com/limenhq/limen/gateway/profile"
	"github.com/limenhq/limen/gateway/requestapi"
)

func newKubeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kube",
		Short: "Kubernetes access through Limen: list clusters, write kubeconfigs, the kubectl credential plugin, what may I do",
		Long: `Use Kubernetes through Limen after limen login: limen kube ls lists the
clusters policy lets you reach, limen kube login CLUSTER writes a kubeconfig
for one of them, limen kube credentials is the kubectl plugin that
kubeconfig runs, and limen kube access CLUSTER says what you may do there.`,
		Example: `  limen kube ls
  export KUBECONFIG=$(limen kube login demo | sed -n 's/^export KUBECONFIG=//p')
  kubectl get pods
  limen kube access demo -n default`,
	}
	cmd.PersistentFlags().String("proxy", "", "proxy HOST:PORT (default: the last one logged in to)")
	cmd.AddCommand(newKubeLsCmd(), newKubeLoginCmd(), newKubeCredentialsCmd(), newKubeAccessCmd())
	return cmd
}

func newKubeLsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List the clusters policy lets you reach and whether a worker is connected for each",
		Long: `List the clusters the policy gives you groups on, with your certificate,
and whether a worker for each is connected to the proxy now (without one,
requests to that cluster get 503).`,
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
	var all bool
	cmd := &cobra.Command{
		Use:   "login CLUSTER [--app NAME] [--server-url-style server-name|path|dns] | login --all",
		Short: "Write a kubeconfig for CLUSTER (or, with --all, every cluster you can reach or request) whose only credential is the limen plugin, and print the export line",
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

With --all it writes one kubeconfig (kubeconfig-all.json) with a context
limen-CLUSTER for each cluster policy lets you reach and each where you
may request a role (limen request), so that kubectl --context switches
between them.

With --app NAME the kubeconfig's credential is bound to the application
client NAME, registered in policy: the plugin exchanges your login
certificate for a short-lived one for NAME, and requests made with it get
NAME's groups, user name and scope, never the command line's.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if all {
				if len(args) != 0 || app != "" {
					return fmt.Errorf("--all writes every cluster: give no CLUSTER and no --app")
				}
				if style != "" && style != string(profile.StyleServerName) {
					return fmt.Errorf("--all writes the server-name style only: drop --server-url-style, or name one CLUSTER")
				}
				return nil
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			urlStyle, err := profile.ParseServerURLStyle(style)
			if err != nil {
				return fmt.Errorf("--server-url-style: %w", err)
			}
			p, err := commandProfile(cmd)
			if err != nil {
				return err
			}
			if !all {
				if _, _, err := profile.ClusterServer(p.Proxy, args[0], urlStyle); err != nil {
					return fmt.Errorf("--server-url-style %s: %w", urlStyle, err)
				}
			}
			creds, err := p.Credentials(time.Now())
			if err != nil {
				return err
			}
			var reachable []string
			if all {
				if reachable, err = allClusters(cmd, p, creds); err != nil {
					return err
				}
			} else if c, err := p.Client(creds); err == nil {
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
			var path string
			if all {
				path, err = p.WriteAllKubeconfig(reachable, plugin)
			} else {
				path, err = p.WriteKubeconfig(args[0], urlStyle, plugin)
			}
			if err != nil {
				return err
			}
			if all {
				fmt.Fprintf(cmd.ErrOrStderr(), "contexts: limen-%s\n", strings.Join(reachable, ", limen-"))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "export KUBECONFIG=%s\n", path)
			return nil
		},
	}
	cmd.Flags().StringVar(&app, "app", "", "bind the credential to this application client, registered in policy")
	cmd.Flags().BoolVar(&all, "all", false, "one kubeconfig with a context per cluster you can reach or may request")
	cmd.Flags().StringVar(&style, "server-url-style", string(profile.StyleServerName),
		"how the kubeconfig names the cluster: server-name (https://HOST:PORT and tls-server-name CLUSTER.kube.HOST), "+
			"path (https://HOST:PORT/k8s/CLUSTER, for clients that ignore tls-server-name, such as the Python client) or "+
			"dns (https://CLUSTER.kube.HOST:PORT, with a wildcard DNS name)")
	return cmd
}

// allClusters are the clusters policy lets the caller reach and those
// where it may request a role, sorted, each once.
func allClusters(cmd *cobra.Command, p *profile.Profile, creds *profile.Credentials) ([]string, error) {
	c, err := p.Client(creds)
	if err != nil {
		return nil, err
	}
	list, err := c.Clusters(cmd.Context())
	if err != nil {
		return nil, err
	}
	var names []string
	for _, cl := range list {
		names = append(names, cl.Name)
	}
	rc := &requestapi.Client{Client: c.Client}
	more, err := rc.Clusters(cmd.Context())
	if err != nil {
		return nil, fmt.Errorf("clusters where you may request access: %w", err)
	}
	names = append(names, more...)
	slices.Sort(names)
	return slices.Compact(names), nil
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
