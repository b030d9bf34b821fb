package main

import (
	"encoding/json"

	"github.com/spf13/cobra"

	"github.com/limenhq/limen/gateway/buildinfo"
)

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print Limen's version and commit, and the Go and OPA versions it was built with",
		Long: `Print the version and commit this binary was built from, and the Go and
OPA versions it was built with; --json prints the same as JSON.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := buildinfo.Get()
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(info)
			}
			_, err := cmd.OutOrStdout().Write([]byte(info.String()))
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}
