package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newLogoutCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "logout",
		Short: "Remove the stored certificate and key for a proxy",
		Long: `Remove the certificate and key limen login stored for the proxy (the last
one logged in to, or --proxy) from this machine. Nothing is sent to the
proxy; kubeconfigs written by limen kube login stay and work again after the
next limen login.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := commandProfile(cmd)
			if err != nil {
				return err
			}
			removed, err := p.Logout()
			if err != nil {
				return err
			}
			if removed {
				fmt.Fprintf(cmd.OutOrStdout(), "Logged out of %s.\n", p.Proxy)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "Not logged in to %s.\n", p.Proxy)
			}
			return nil
		},
	}
	cmd.Flags().String("proxy", "", "proxy HOST:PORT (default: the last one logged in to)")
	return cmd
}
