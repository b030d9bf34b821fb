package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/store"
)

func newAuditCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Read the audit trail: every request, session, refusal, login and admin change",
		Long: `Read the audit trail the proxy keeps: one event per Kubernetes request
(kube.sent before it is forwarded, kube.request with its outcome), per
stream (session.start, session.end), per refusal (auth.denied), and per
login and administrative change. To send it to a SIEM, see the proxy's
--audit-export-file and --audit-webhook-config.`,
	}
	cmd.AddCommand(newAuditSearchCmd())
	return cmd
}

func newAuditSearchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "search",
		Short: "Search audit events in the proxy's store (on the proxy host)",
		Long: `Search the audit events the proxy has stored, newest last. The store is
opened read-only in --data-dir (the proxy's data directory), so this runs on
the proxy host, alongside a running proxy; or, with --database-url, in the
PostgreSQL database the proxies share, from anywhere that reaches it.

  limen audit search --user alice --cluster prod --verb delete --since 24h
  limen audit search --type auth.denied --since 2026-11-01T00:00:00Z --json
  limen audit search --action admin --since 24h   # refused admin calls
  limen audit search --outcome-unknown --since 24h # requests sent, outcome never stored

A request is stored twice: the proxy's record of it (kube.sent), durable
before any byte of the response is relayed, and its outcome (kube.request,
or the worker's auth.denied) appended after. A search shows the outcome; a
record whose outcome was never stored (the proxy stopped, the worker went
away, the audit trail failed after the request left) is shown as
"outcome unknown", and a write among them as "possibly applied, not fully
audited". A request still under way is shown so too until it is answered.
--type kube.sent lists every record, with or without its outcome.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			q, err := auditQuery(v, time.Now())
			if err != nil {
				return err
			}
			s, err := openAuditReadOnly(cmd.Context(), v)
			if err != nil {
				return err
			}
			defer s.Close()
			events, err := s.Search(cmd.Context(), q)
			if err != nil {
				return err
			}
			if v.GetBool("json") {
				return writeEventsJSON(cmd.OutOrStdout(), events)
			}
			return writeEventsTable(cmd.OutOrStdout(), events)
		},
	}
	f := cmd.Flags()
	f.String("data-dir", "", "the proxy's data directory")
	addDatabaseFlags(f)
	f.String("user", "", "only events by this user or bot: NAME matches it from every source (local and each identity provider, told apart in the FROM column), KIND:NAME only the local one, user:ISSUER:NAME only that provider's")
	f.String("cluster", "", "only events for this cluster")
	f.String("verb", "", "only kube.request events with this Kubernetes verb (get, list, watch, delete, …)")
	f.String("type", "", "only events of this type (kube.request, kube.sent, auth.denied, session.start, …)")
	f.Bool("outcome-unknown", false, "only requests sent whose outcome is not stored (kube.sent without kube.request)")
	f.String("action", "", "only auth.denied events that refused this: kube, admin, login or enroll")
	f.String("since", "", "only events newer than this: a duration (1h, 30m) or an RFC 3339 time")
	f.Int("limit", 1000, "at most this many events, the newest")
	f.Bool("json", false, "print one JSON event per line")
	return cmd
}

// auditQuery builds the search from flags, validating each.
func auditQuery(v *viper.Viper, now time.Time) (audit.Query, error) {
	q := audit.Query{
		User:    v.GetString("user"),
		Cluster: v.GetString("cluster"),
		Verb:    v.GetString("verb"),
		Type:    audit.Type(v.GetString("type")),
		Action:  v.GetString("action"),
		Limit:   v.GetInt("limit"),

		OutcomeUnknown: v.GetBool("outcome-unknown"),
	}
	if q.OutcomeUnknown && (q.Type != "" && q.Type != audit.TypeKubeSent || q.Action != "") {
		return q, fmt.Errorf("--outcome-unknown selects kube.sent events; drop --type and --action")
	}
	if q.Action != "" && !audit.ValidAction(q.Action) {
		return q, fmt.Errorf("action %q: want one of %s, %s, %s, %s", q.Action, audit.ActionKube, audit.ActionAdmin, audit.ActionLogin, audit.ActionEnroll)
	}
	if q.Action != "" && q.Type != "" && q.Type != audit.TypeAuthDenied {
		return q, fmt.Errorf("action %q with type %s: --action selects auth.denied events; drop --type or use --type %s", q.Action, q.Type, audit.TypeAuthDenied)
	}
	if q.Limit <= 0 {
		return q, fmt.Errorf("limit %d: must be at least 1", q.Limit)
	}
	since, err := parseSince(v.GetString("since"), now)
	if err != nil {
		return q, err
	}
	q.Since = since
	return q, nil
}

func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("since %q: a duration must be positive, like 1h", s)
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("since %q: want a duration like 1h or 30m, or an RFC 3339 time like 2026-11-01T00:00:00Z", s)
}

func writeEventsJSON(w io.Writer, events []audit.Event) error {
	enc := json.NewEncoder(w)
	for _, e := range events {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return nil
}

func writeEventsTable(w io.Writer, events []audit.Event) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tTYPE\tWHO\tFROM\tCLUSTER\tDETAIL")
	for _, e := range events {
		who, from := e.Principal.String(), e.Principal.Provenance()
		if e.Principal.Name == "" {
			who, from = "-", "-"
		} else if c := e.Principal.ClientID; c != "" && c != identity.ClientKubectl {
			who += " via " + c // the command line's is the usual case, left unsaid
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Time.Local().Format(time.RFC3339), e.Type, who, from, dash(e.Cluster), eventDetail(e))
	}
	return tw.Flush()
}

// eventDetail is a one-line summary of an event's body.
func eventDetail(e audit.Event) string {
	switch {
	case e.Kube != nil && e.Type == audit.TypeKubeSent:
		k := e.Kube
		d := fmt.Sprintf("%s %s %s", dash(k.Verb), k.Method, k.Path)
		switch {
		case e.PossiblyApplied:
			return d + " OUTCOME UNKNOWN: possibly applied, not fully audited"
		case e.OutcomeUnknown:
			return d + " outcome unknown"
		}
		return d + " (outcome stored)"
	case e.Kube != nil:
		k := e.Kube
		return fmt.Sprintf("%s %s %s %d %s", k.Verb, k.Method, k.Path, k.Status, k.Latency.Round(time.Microsecond))
	case e.Denied != nil:
		d := fmt.Sprintf("%s refused %s %s: %s", e.Denied.Hop, dash(e.Denied.Action), dash(e.Denied.Path), e.Denied.Reason)
		if e.Denied.Count > 1 {
			d += fmt.Sprintf(" (×%d)", e.Denied.Count)
		}
		return d
	case e.Session != nil:
		s := e.Session
		target := s.Target
		if target == "" {
			target = s.Namespace + "/" + s.Pod
		}
		parts := []string{s.Kind, s.Login, target}
		if len(s.Command) > 0 {
			parts = append(parts, strconv.Quote(strings.Join(s.Command, " ")))
		}
		if s.ExitCode != nil {
			parts = append(parts, "exit="+strconv.Itoa(*s.ExitCode))
		}
		if s.EndReason != "" {
			parts = append(parts, "end="+s.EndReason)
		}
		return strings.Join(parts, " ")
	case len(e.Fields) > 0:
		b, _ := json.Marshal(e.Fields)
		return string(b)
	}
	return "-"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// auditReader is a read-only audit store and the backend under it.
type auditReader struct {
	*audit.Store
	backend store.Backend
}

func (r auditReader) Close() error {
	r.Store.Close()
	return r.backend.Close()
}

// openAuditReadOnly opens the proxy's audit trail for searching: in the
// --database-url database, or read-only in --data-dir.
func openAuditReadOnly(ctx context.Context, v *viper.Viper) (auditReader, error) {
	dbc, err := loadDatabaseConfig(v)
	if err != nil {
		return auditReader{}, err
	}
	dir := v.GetString("data-dir")
	if dbc.URL == "" && dir == "" {
		return auditReader{}, errors.New("data-dir: required; set --data-dir or LIMEN_DATA_DIR to the proxy's data directory, or database-url to the proxies' database")
	}
	b, err := dbc.backend(ctx, dir)
	if err != nil {
		return auditReader{}, err
	}
	db, err := b.Audit(ctx, true)
	if errors.Is(err, fs.ErrNotExist) {
		b.Close()
		return auditReader{}, fmt.Errorf("no audit store at %s: is --data-dir the proxy's data directory, and has the proxy run?", audit.Path(dir))
	}
	if err != nil {
		b.Close()
		return auditReader{}, err
	}
	s, err := audit.New(ctx, db, audit.Options{ReadOnly: true})
	if err != nil {
		db.Close()
		b.Close()
		return auditReader{}, err
	}
	return auditReader{Store: s, backend: b}, nil
}
