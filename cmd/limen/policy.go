package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/policy"
)

func newPolicyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Debug and check Limen's OPA policy: eval, check, status",
		Long: `Limen asks an OPA/Rego policy which Kubernetes groups a principal may
assume on a cluster. These commands run the same engine as the proxy and the
worker, so what they print is what a request would get.

The policy is the embedded default unless --policy-bundle-url (or --bundle)
names a bundle; see policies/README.md for the inputs, decisions and data.`,
	}
	cmd.AddCommand(newPolicyEvalCmd(), newPolicyCheckCmd(), newPolicyStatusCmd())
	return cmd
}

func newPolicyEvalCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "eval --principal NAME [--traits K=V]... --cluster NAME [--labels K=V]...",
		Short: "Print the groups a principal gets on a cluster, and the roles that granted them",
		Long: `Evaluate the policy for a principal (--principal, --kind, --traits,
--issuer, --client) on a cluster (--cluster, --labels) and print the groups
it would be impersonated with and the roles that granted them; --action
also decides an administrative action. The policy is the embedded default,
the configured bundle (--policy-bundle-url) or a bundle file (--bundle),
run by the same engine as the proxy and the worker.`,
		Example: `  limen policy eval --principal alice --traits groups=dev --cluster demo --labels env=dev
  limen policy eval --principal ci-deployer --kind bot --cluster demo
  limen policy eval --principal bob --cluster demo --bundle bin/limen-bundle.tar.gz \
      --public-key bundles/testkeys/TEST-ONLY-verification-key.pem`,
		Args: cobra.NoArgs,
		RunE: runPolicyEval,
	}
	f := cmd.Flags()
	f.String("principal", "", "user or bot name (required)")
	f.String("kind", string(identity.KindUser), "principal kind: user or bot")
	f.String("issuer", "", "the identity provider the user comes from (the proxy's --oidc-issuer-name, such as oidc); empty: a local user or bot")
	f.String("client", identity.ClientKubectl, "the client the credential names: kubectl, console or an application registered in policy")
	f.StringSlice("traits", nil, "principal trait as NAME=VALUE (repeatable, or comma-separated)")
	f.String("cluster", "", "cluster name (required)")
	f.StringSlice("labels", nil, "cluster label as NAME=VALUE (repeatable, or comma-separated)")
	f.String("action", "", "also decide this administrative action (for example session.kill)")
	f.Bool("json", false, "print the decision as JSON")
	addBundleFlags(f)
	addPolicyFlags(f)
	return cmd
}

func runPolicyEval(cmd *cobra.Command, _ []string) error {
	v, err := loadConfig(cmd)
	if err != nil {
		return err
	}
	p, c, err := evalInput(v.GetString("principal"), v.GetString("kind"), v.GetStringSlice("traits"), v.GetString("cluster"), v.GetStringSlice("labels"))
	if err != nil {
		return err
	}
	if p.Issuer = v.GetString("issuer"); p.Issuer != "" {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("issuer: %w", err)
		}
	}
	p.ClientID = v.GetString("client")
	if err := identity.ValidClient(p.ClientID); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	engine, err := cliEngine(cmd, v)
	if err != nil {
		return err
	}
	defer engine.Close()
	ctx := cmd.Context()
	d, err := engine.Explain(ctx, p, c)
	if err != nil {
		return fmt.Errorf("evaluate: %w", err)
	}
	out := evalOutput{Principal: p, Cluster: c, Revision: d.Revision, Groups: d.Groups, Roles: d.Roles}
	if out.Groups == nil {
		out.Groups = []string{}
	}
	if action := v.GetString("action"); action != "" {
		allow, err := engine.AdminAllow(ctx, p, action)
		if err != nil {
			return fmt.Errorf("evaluate admin action: %w", err)
		}
		out.Action, out.ActionAllowed = action, &allow
	}
	if v.GetBool("json") {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	return out.print(cmd.OutOrStdout())
}

// evalOutput is what `limen policy eval` prints.
type evalOutput struct {
	Principal     identity.Principal  `json:"principal"`
	Cluster       policy.Cluster      `json:"cluster"`
	Revision      string              `json:"revision"`
	Groups        []string            `json:"groups"`
	Roles         map[string][]string `json:"roles,omitempty"`
	Action        string              `json:"action,omitempty"`
	ActionAllowed *bool               `json:"action_allowed,omitempty"`
}

func (o evalOutput) print(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "principal\t%s\t%s\n", o.Principal, formatPairs(o.Principal.Traits))
	fmt.Fprintf(tw, "cluster\t%s\t%s\n", o.Cluster.Name, formatLabels(o.Cluster.Labels))
	fmt.Fprintf(tw, "revision\t%s\n", o.Revision)
	if len(o.Groups) == 0 {
		fmt.Fprintf(tw, "groups\t(none: access denied)\n")
	}
	for _, g := range o.Groups {
		var by []string
		for role, gs := range o.Roles {
			if slices.Contains(gs, g) {
				by = append(by, role)
			}
		}
		slices.Sort(by)
		reason := "granted by role " + strings.Join(by, ", ")
		if len(by) == 0 {
			reason = "granted by a rule outside the role model"
		}
		fmt.Fprintf(tw, "group\t%s\t%s\n", g, reason)
	}
	if o.ActionAllowed != nil {
		fmt.Fprintf(tw, "admin\t%s\t%s\n", o.Action, map[bool]string{true: "allowed", false: "denied"}[*o.ActionAllowed])
	}
	return tw.Flush()
}

func formatPairs(m map[string][]string) string {
	var parts []string
	for _, k := range slices.Sorted(mapsKeys(m)) {
		for _, v := range m[k] {
			parts = append(parts, k+"="+v)
		}
	}
	return strings.Join(parts, " ")
}

func formatLabels(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(mapsKeys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, " ")
}

func newPolicyCheckCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "check BUNDLE.tar.gz",
		Short: "Validate a bundle offline with exactly the checks activation runs",
		Long: `check verifies the bundle's signature (with --public-key), compiles its
policy, runs its data validation and probes its decisions for system: or
malformed groups: the same checks the proxy and the worker run before a
bundle may replace the active one. It exits non-zero with the reason if the
bundle would be refused.`,
		Example: `  make bundle
  limen policy check bin/limen-bundle.tar.gz --public-key bundles/testkeys/TEST-ONLY-verification-key.pem`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			v.Set("bundle", args[0])
			engine, err := cliEngine(cmd, v)
			if err != nil {
				return err
			}
			defer engine.Close()
			st := engine.Status()
			fmt.Fprintf(cmd.OutOrStdout(), "ok: %s (revision %s) would be activated\n", args[0], st.Revision)
			if v.GetBool("insecure-skip-verify") {
				fmt.Fprintln(cmd.OutOrStdout(), "warning: the signature was not checked (--insecure-skip-verify)")
			}
			return nil
		},
	}
	addBundleFlags(cmd.Flags())
	cmd.Flags().Lookup("bundle").Hidden = true
	return cmd
}

func newPolicyStatusCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the active bundle revision, last fetch and refused bundles of a proxy or worker",
		Long: `status reads the policy status that a running proxy or worker saves in its
policy directory (--policy-persist-dir, by default <data-dir>/policy). With
--probe it instead builds the configured engine here, fetches once and shows
what a process starting now would see.

Each refusal line gives the time, the reason and the refused revision:
  rollback                     revision older than the active or persisted one
  same-revision-other-content  the active or persisted revision with other content
  bad-signature                signature missing or not verifying with policy-public-key
  bad-revision                 revision missing or not an unsigned integer
  not-https                    the bundle service redirected away from https
  fetch-error                  the bundle service was unreachable or answered an error
  invalid-bundle               the bundle failed compilation or the activation checks
The active bundle keeps answering in every case.

A "fast path off" line says why the active revision's uncached group
decisions are full Rego evaluations (hundreds of µs) instead of lookups in an
index of its data: its policy is not Limen's own, or its data has a shape the
index does not read. The decisions are the same either way.`,
		Args: cobra.NoArgs,
		RunE: runPolicyStatus,
	}
	f := cmd.Flags()
	f.String("data-dir", "", "the proxy's or worker's data directory")
	f.Bool("probe", false, "fetch the configured bundle now instead of reading a running process's status")
	f.Bool("json", false, "print as JSON")
	addPolicyFlags(f)
	return cmd
}

func runPolicyStatus(cmd *cobra.Command, _ []string) error {
	v, err := loadConfig(cmd)
	if err != nil {
		return err
	}
	var st policy.Status
	if v.GetBool("probe") {
		if st, err = probeStatus(cmd, v); err != nil {
			return err
		}
	} else {
		dir := policyPersistDir(v)
		if dir == "" {
			return errors.New("data-dir or policy-persist-dir: required to find a running process's status (or use --probe)")
		}
		if st, err = policy.ReadStatus(dir); err != nil {
			return err
		}
	}
	if v.GetBool("json") {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	return printStatus(cmd.OutOrStdout(), st)
}

// probeStatus builds the configured engine here and fetches once. A refused
// or unreachable bundle is part of the status it shows, not an error.
func probeStatus(cmd *cobra.Command, v *viper.Viper) (policy.Status, error) {
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelError}))
	opts, err := policyOptions(v, log)
	if err != nil {
		return policy.Status{}, err
	}
	opts.PersistDir = "" // never disturb a running process's files
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	e, err := policy.New(ctx, opts)
	if err != nil {
		return policy.Status{}, err
	}
	defer e.Close()
	_ = e.Refresh(ctx) // recorded in the status
	return e.Status(), nil
}

func printStatus(w io.Writer, st policy.Status) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "source\t%s\t%s\n", st.Source, st.URL)
	rev := st.Revision
	if rev == "" {
		rev = "(none active: decisions fail with 503)"
	}
	fmt.Fprintf(tw, "revision\t%s\n", rev)
	fmt.Fprintf(tw, "activated\t%s\n", formatTime(st.ActivatedAt))
	fmt.Fprintf(tw, "last fetch\t%s\n", formatTime(st.LastFetch))
	if st.FastPathOff != "" {
		fmt.Fprintf(tw, "fast path\toff: uncached decisions are full Rego evaluations\t%s\n", st.FastPathOff)
	}
	if st.LastError != "" {
		fmt.Fprintf(tw, "last error\t%s\t%s\n", formatTime(st.LastErrorAt), st.LastError)
	} else {
		fmt.Fprintf(tw, "last error\t-\n")
	}
	fmt.Fprintf(tw, "refused\t%d\n", st.Refused)
	if len(st.Refusals) == 0 {
		fmt.Fprintf(tw, "refusals\t-\n")
	}
	for _, r := range st.Refusals {
		fmt.Fprintf(tw, "refusal\t%s\t%s\t%s\n", formatTime(r.At), r.Reason, refusalSummary(r))
	}
	return tw.Flush()
}

// refusalSummary is one refusal's revision, repeats and message on one line.
func refusalSummary(r policy.Refusal) string {
	var b strings.Builder
	rev := r.Revision
	if rev == "" {
		rev = "-"
	}
	active := r.Active
	if active == "" {
		active = "none"
	}
	fmt.Fprintf(&b, "revision %s", rev)
	if r.Unverified {
		b.WriteString(" unverified")
	}
	fmt.Fprintf(&b, " (active %s)", active)
	if r.Count > 1 {
		fmt.Fprintf(&b, ", %d times since %s", r.Count, formatTime(r.First))
	}
	b.WriteString(": ")
	b.WriteString(r.Error)
	return b.String()
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// addBundleFlags registers the one-off bundle source of eval and check.
func addBundleFlags(f interface {
	String(name, value, usage string) *string
	Bool(name string, value bool, usage string) *bool
}) {
	f.String("bundle", "", "evaluate this bundle instead: a .tar.gz file or an https URL (see --policy-bundle-ca)")
	f.String("public-key", "", "PEM public key to verify --bundle's signature")
	f.Bool("insecure-skip-verify", false, "accept an unsigned --bundle file (offline debugging only)")
}

// cliEngine builds an engine for a CLI command: --bundle when given,
// otherwise the configured source, fetched once.
func cliEngine(cmd *cobra.Command, v *viper.Viper) (*policy.Engine, error) {
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	src := v.GetString("bundle")
	if src == "" {
		opts, err := policyOptions(v, log)
		if err != nil {
			return nil, err
		}
		opts.PersistDir = "" // never disturb a running process's files
		return startEngine(ctx, opts)
	}
	opts := policy.Options{Logger: log, InsecureSkipVerify: v.GetBool("insecure-skip-verify")}
	if path := v.GetString("public-key"); path != "" {
		key, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("public-key: %w", err)
		}
		opts.PublicKeyPEM = key
	}
	if u, err := url.Parse(src); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
		if u.Scheme == "http" {
			return nil, fmt.Errorf("bundle %s: http:// is refused, bundles come over https only (or give a local file)", u.Redacted())
		}
		if opts.InsecureSkipVerify {
			return nil, errors.New("insecure-skip-verify: only for a bundle file; a bundle URL is always verified (give --public-key)")
		}
		opts.BundleURL = src
		if opts.BundleCAPEM, err = bundleCA(v); err != nil {
			return nil, err
		}
		return startEngine(ctx, opts)
	}
	if opts.PublicKeyPEM == nil && !opts.InsecureSkipVerify {
		return nil, fmt.Errorf("public-key: required to verify the signature of %s (or --insecure-skip-verify for offline debugging)", src)
	}
	raw, err := os.ReadFile(src)
	if err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	opts.Bundle = raw
	e, err := policy.New(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", src, err)
	}
	return e, nil
}

// startEngine builds the engine and, for a bundle service, fetches once.
func startEngine(ctx context.Context, opts policy.Options) (*policy.Engine, error) {
	e, err := policy.New(ctx, opts)
	if err != nil {
		return nil, err
	}
	if opts.BundleURL != "" {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := e.Refresh(ctx); err != nil {
			e.Close()
			return nil, fmt.Errorf("bundle %s: %w", opts.BundleURL, err)
		}
	}
	return e, nil
}
