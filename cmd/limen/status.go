package main

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/limenhq/limen/gateway/identity"
)

func newStatusCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show who you are logged in as, your traits, until when, and the clusters you may reach",
		Long: `Show, for the proxy last logged in to (or --proxy), the principal your
certificate names, where it comes from (local or an identity provider), its
client, its traits, until when it is valid, and the clusters policy lets
you reach (asked of the proxy).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := commandProfile(cmd)
			if err != nil {
				return err
			}
			creds, err := p.Credentials(time.Now())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "Proxy:       %s\n", p.Proxy)
			fmt.Fprintf(out, "Logged in as: %s\n", creds.Principal.String())
			fmt.Fprintf(out, "From:        %s\n", provenanceText(creds.Principal))
			fmt.Fprintf(out, "Client:      %s\n", clientName(creds.Principal))
			fmt.Fprintf(out, "Traits:      %s\n", formatTraits(creds.Principal))
			left := time.Until(creds.Cert.NotAfter).Round(time.Minute)
			fmt.Fprintf(out, "Valid until: %s (%s left)\n", creds.Cert.NotAfter.Local().Format(time.RFC1123), left)
			client, err := p.Client(creds)
			if err != nil {
				return err
			}
			clusters, err := client.Clusters(cmd.Context())
			if err != nil {
				return fmt.Errorf("list clusters: %w", err)
			}
			names := make([]string, 0, len(clusters))
			for _, c := range clusters {
				names = append(names, c.Name)
			}
			if len(names) == 0 {
				names = append(names, "(none)")
			}
			fmt.Fprintf(out, "Clusters:    %s\n", strings.Join(names, ", "))
			return nil
		},
	}
	cmd.Flags().String("proxy", "", "proxy HOST:PORT (default: the last one logged in to)")
	return cmd
}

// clientName is the client a credential names; one naming none says so
// (the proxy refuses it).
func clientName(p identity.Principal) string {
	if p.ClientID == "" {
		return "(none: this certificate gets nothing, run limen login)"
	}
	return p.ClientID
}

// provenanceText says where a principal comes from: Limen's own directory
// or the identity provider that vouched for it.
func provenanceText(p identity.Principal) string {
	if p.Issuer == "" {
		return identity.ProvenanceLocal + " (a user or bot of this proxy's own directory)"
	}
	return "identity provider " + p.Issuer + " (its people are never the local users of the same name)"
}

func formatTraits(p identity.Principal) string { return formatTraitMap(p.Traits) }

// formatTraitMap prints traits as sorted KEY=V1,V2 pairs.
func formatTraitMap(traits map[string][]string) string {
	if len(traits) == 0 {
		return "(none)"
	}
	keys := make([]string, 0, len(traits))
	for k := range traits {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+strings.Join(traits[k], ","))
	}
	return strings.Join(parts, " ")
}
