package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/limenhq/limen/gateway/access"
	"github.com/limenhq/limen/gateway/profile"
	"github.com/limenhq/limen/gateway/proxy"
	"github.com/limenhq/limen/gateway/requestapi"
)

func newKubeAccessCmd() *cobra.Command {
	var app, ns, output string
	cmd := &cobra.Command{
		Use:   "access CLUSTER [--app NAME] [-n NAMESPACE] [-o json]",
		Short: "What may I do: for each resource and verb, allowed, refused by Kubernetes, or out of the client's scope",
		Long: `Ask the proxy what you may do on CLUSTER in a namespace, as the command line
or, with --app, as the application client NAME. Each resource and verb gets
one of three answers: allowed; refused by Kubernetes (RBAC, from a
SelfSubjectRulesReview made as your identity through that client); or out
of scope (the client's Limen scope refuses it before Kubernetes is asked).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := commandProfile(cmd)
			if err != nil {
				return err
			}
			var creds *profile.Credentials
			if app != "" {
				creds, err = p.AppCredentials(cmd.Context(), app, time.Now())
			} else {
				creds, err = p.Credentials(time.Now())
			}
			if err != nil {
				return err
			}
			c, err := p.Client(creds)
			if err != nil {
				return err
			}
			var rep access.Report
			q := url.Values{"cluster": {args[0]}, "namespace": {ns}}
			if err := c.Do(cmd.Context(), http.MethodGet, proxy.PathAccess+"?"+q.Encode(), nil, &rep); err != nil {
				return err
			}
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			if output != "" {
				return fmt.Errorf("-o %s: only json is supported", output)
			}
			if err := printAccess(cmd, rep); err != nil {
				return err
			}
			// What could be requested on top (docs/ACCESS-REQUESTS.md);
			// a proxy that cannot say leaves the report as it is.
			rc := &requestapi.Client{Client: c.Client}
			if req, err := rc.Requestable(cmd.Context(), args[0]); err == nil && len(req.Roles) > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "\nYou may request more on %s: %s\n", args[0], proxy.RequestCommands(args[0], req.Roles))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&app, "app", "", "answer for this application client (limen kube login --app)")
	cmd.Flags().StringVarP(&ns, "namespace", "n", "default", "the namespace to answer for")
	cmd.Flags().StringVarP(&output, "output", "o", "", "json for the whole report")
	return cmd
}

func printAccess(cmd *cobra.Command, rep access.Report) error {
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "Cluster %s, namespace %s, client %s\n", rep.Cluster, rep.Namespace, rep.Client)
	if rep.Incomplete {
		fmt.Fprintln(out, "Kubernetes could not list every rule: some \"refused by Kubernetes\" may be allowed")
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "RESOURCE\t%s\n", strings.ToUpper(strings.Join(access.Verbs, "\t")))
	short := map[access.Answer]string{access.Allowed: "yes", access.RefusedByKubernetes: "rbac", access.OutOfScope: "scope"}
	for _, row := range rep.Rows {
		cells := make([]string, len(access.Verbs))
		for i, v := range access.Verbs {
			cells[i] = short[row.Answers[v]]
		}
		fmt.Fprintf(tw, "%s\t%s\n", row.Resource.String(), strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(out, "yes: allowed; rbac: refused by Kubernetes; scope: out of this client's Limen scope")
	return err
}
