package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/limenhq/limen/gateway/profile"
	"github.com/limenhq/limen/gateway/requestapi"
	"github.com/limenhq/limen/gateway/requests"
)

// requestClient is the access-request API as the profile's login.
func requestClient(cmd *cobra.Command) (*requestapi.Client, *profile.Profile, error) {
	p, err := commandProfile(cmd)
	if err != nil {
		return nil, nil, err
	}
	creds, err := p.Credentials(time.Now())
	if err != nil {
		return nil, nil, err
	}
	c, err := p.Client(creds)
	if err != nil {
		return nil, nil, err
	}
	return &requestapi.Client{Client: c.Client}, p, nil
}

func newRequestCmd() *cobra.Command {
	var cluster, reason string
	var dur time.Duration
	cmd := &cobra.Command{
		Use:   "request ROLE --cluster CLUSTER --for DURATION [--reason TEXT]",
		Short: "Ask for a role on one cluster for a while (just-in-time access); prints the request id",
		Long: `Ask for ROLE on CLUSTER for DURATION. The policy says which roles you may
request, for how long at most, whether a reason is required and who
approves (limen kube access CLUSTER lists them). The request waits for its
approvers (limen requests approve ID, or the console's Requests page);
once approved, kubectl's next request through Limen (the limen plugin)
carries the role until the request expires, DURATION after its approval.
Every step is audited.`,
		Example: `  limen request edit-demo --cluster demo --for 1h --reason "INC-123: restart the api pods"`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cluster == "" {
				return fmt.Errorf("--cluster is required: the cluster the role is for")
			}
			if dur <= 0 {
				return fmt.Errorf("--for is required: how long you need the role, for example --for 1h")
			}
			c, p, err := requestClient(cmd)
			if err != nil {
				return err
			}
			r, err := c.Create(cmd.Context(), requestapi.CreateRequest{Role: args[0], Cluster: cluster, Duration: dur.String(), Reason: reason})
			if err != nil {
				return err
			}
			if err := p.AddRequestID(r.ID); err != nil {
				return fmt.Errorf("request %s made, but not remembered in your profile (%w): kubectl will not carry it", r.ID, err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), r.ID)
			if r.State == requests.StateApproved {
				fmt.Fprintf(cmd.ErrOrStderr(), "approved by policy until %s\n", r.Expires.Local().Format(time.RFC3339))
			} else {
				fmt.Fprintf(cmd.ErrOrStderr(), "pending: %d approval(s) needed (limen requests ls shows its state)\n", r.Needed)
			}
			return nil
		},
	}
	cmd.Flags().String("proxy", "", "proxy HOST:PORT (default: the last one logged in to)")
	cmd.Flags().StringVar(&cluster, "cluster", "", "the cluster the role is for (required)")
	cmd.Flags().DurationVar(&dur, "for", 0, "how long the access lasts once approved, e.g. 30m or 1h (required; at most what policy allows)")
	cmd.Flags().StringVar(&reason, "reason", "", "why you need it, e.g. an incident number (required when policy says so)")
	return cmd
}

func newRequestsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "requests",
		Short: "List, approve and deny access requests (limen request makes them)",
		Long: `Work with access requests through the proxy you logged in to: list yours
and those policy lets you decide (ls), and approve or deny one (approve,
deny). Policy names the approvers of each requestable role, by role or
trait, and never the requester; a request is approved once it has the
approvals its role needs, and the requester's next kubectl request carries
the role until it expires. Every decision is audited with who and why. The
console's Requests page does the same in a browser.`,
	}
	cmd.PersistentFlags().String("proxy", "", "proxy HOST:PORT (default: the last one logged in to)")
	var state, output string
	ls := &cobra.Command{
		Use:   "ls [--state pending|approved|denied|expired] [-o json]",
		Short: "List your requests and those you may approve",
		Long: `List, from the proxy, the access requests you made and those policy lets
you approve or deny: id, requester, role, cluster, duration, state
(pending, approved, denied, expired), approvals given and needed, expiry
and reason. --state keeps one state; -o json prints the whole list.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, _, err := requestClient(cmd)
			if err != nil {
				return err
			}
			list, err := c.List(cmd.Context(), state)
			if err != nil {
				return err
			}
			switch output {
			case "json":
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(list)
			case "":
			default:
				return fmt.Errorf("-o %s: only json is supported", output)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tREQUESTER\tROLE\tCLUSTER\tFOR\tSTATE\tAPPROVALS\tEXPIRES\tREASON")
			for _, r := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", r.ID, r.Requester.String(), r.Role, r.Cluster, r.Duration,
					r.State, len(r.Approvals), r.Needed, r.Expires.Local().Format(time.RFC3339), strings.ReplaceAll(r.Reason, "\t", " "))
			}
			return tw.Flush()
		},
	}
	ls.Flags().StringVar(&state, "state", "", "only requests in this state")
	ls.Flags().StringVarP(&output, "output", "o", "", "json for the whole list")
	cmd.AddCommand(ls, newDecideCmd("approve"), newDecideCmd("deny"))
	return cmd
}

func newDecideCmd(verb string) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   verb + " ID [--reason TEXT]",
		Short: strings.ToUpper(verb[:1]) + verb[1:] + " an access request (policy says who may; never its requester)",
		Long: strings.ToUpper(verb[:1]) + verb[1:] + ` the access request ID (limen requests ls lists them) as yourself,
with --reason saying why; the proxy refuses unless policy names you an
approver of the request's role, and never lets a requester decide their
own request. The decision is audited with your name and reason.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, err := requestClient(cmd)
			if err != nil {
				return err
			}
			var r requests.Request
			if verb == "approve" {
				r, err = c.Approve(cmd.Context(), args[0], reason)
			} else {
				r, err = c.Deny(cmd.Context(), args[0], reason)
			}
			if err != nil {
				return err
			}
			switch r.State {
			case requests.StateApproved:
				fmt.Fprintf(cmd.OutOrStdout(), "%s approved: %s holds %s on %s until %s\n", r.ID, r.Requester.String(), r.Role, r.Cluster, r.Expires.Local().Format(time.RFC3339))
			case requests.StatePending:
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %d of %d approvals\n", r.ID, len(r.Approvals), r.Needed)
			default:
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", r.ID, r.State)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit trail")
	return cmd
}
