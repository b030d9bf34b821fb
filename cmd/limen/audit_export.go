package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.opentelemetry.io/otel/metric"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/auditexport"
	"github.com/limenhq/limen/gateway/proxy"
	"github.com/limenhq/limen/gateway/store"
)

// auditExportConfig is the proxy's audit export and retention
// (gateway/auditexport).
type auditExportConfig struct {
	// File is --audit-export-file: JSON lines, one audit.k8s.io/v1 Event
	// each.
	File string
	// Webhook is --audit-webhook-config, loaded and checked at start.
	Webhook *auditexport.Webhook
	// WebhookPath is the file it was loaded from.
	WebhookPath string
	// Retention is --audit-retention; 0 keeps every event.
	Retention time.Duration
	// MaxBackoff is --audit-export-max-backoff.
	MaxBackoff time.Duration
}

func addAuditExportFlags(f *pflag.FlagSet) {
	f.String("audit-export-file", "", "also write every audit event to this file as JSON lines of audit.k8s.io/v1 Events "+
		"(the kube-apiserver's log format), delivered at least once from a cursor kept in --data-dir")
	f.String("audit-webhook-config", "", "kubeconfig-format file naming an https receiver (and its credential) to which "+
		"every audit event is posted as audit.k8s.io/v1 EventList batches, as kube-apiserver's --audit-webhook-config-file; "+
		"delivered at least once, in order, from a cursor kept in --data-dir")
	f.Duration("audit-export-max-backoff", auditexport.DefaultMaxBackoff, "longest wait between two attempts to deliver a batch "+
		"the receiver failed or refused (the same batch is retried until accepted, never skipped)")
	f.String("audit-retention", "0", "delete audit events older than this (for example 2160h or 90d), in batches, "+
		"recording each run as an audit.retention event; never deletes an event an export has not delivered; 0 keeps every event")
}

// loadAuditExport reads and checks the export and retention settings,
// naming the key of any that is wrong.
func loadAuditExport(v *viper.Viper) (auditExportConfig, error) {
	c := auditExportConfig{File: strings.TrimSpace(v.GetString("audit-export-file")),
		WebhookPath: strings.TrimSpace(v.GetString("audit-webhook-config")), MaxBackoff: v.GetDuration("audit-export-max-backoff")}
	var err error
	if c.Retention, err = parseRetention(v.GetString("audit-retention")); err != nil {
		return c, err
	}
	if c.MaxBackoff < time.Second || c.MaxBackoff > time.Hour {
		return c, fmt.Errorf("audit-export-max-backoff %s: must be between 1s and 1h", c.MaxBackoff)
	}
	if c.File != "" {
		if fi, err := os.Stat(c.File); err == nil && fi.IsDir() {
			return c, fmt.Errorf("audit-export-file %s: a directory; name a file (or /dev/stdout)", c.File)
		}
		if fi, err := os.Stat(filepath.Dir(c.File)); err != nil || !fi.IsDir() {
			return c, fmt.Errorf("audit-export-file %s: its directory does not exist; create it or choose another path", c.File)
		}
	}
	if c.WebhookPath != "" {
		if c.Webhook, err = auditexport.LoadWebhook(c.WebhookPath); err != nil {
			return c, err
		}
	}
	return c, nil
}

// parseRetention reads --audit-retention: a Go duration or whole days
// ("90d"); 0 keeps everything.
func parseRetention(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	bad := fmt.Errorf("audit-retention %q: want a duration such as 2160h or 90d, at least %s, or 0 to keep every event", s, auditexport.MinRetention)
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 100*365 {
			return 0, bad
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, bad
		}
	}
	if d < 0 || d != 0 && d < auditexport.MinRetention {
		return 0, bad
	}
	return d, nil
}

// sinks are the configured receivers.
func (c auditExportConfig) sinks() []auditexport.Sink {
	var out []auditexport.Sink
	if c.File != "" {
		out = append(out, auditexport.NewFile(c.File))
	}
	if c.Webhook != nil {
		out = append(out, c.Webhook)
	}
	return out
}

// startAuditExport starts the exports and the retention of s's audit
// store, and registers the exports' lag gauges on meter. The returned stop
// ends them and waits: call it before the store closes.
func startAuditExport(ctx context.Context, c auditExportConfig, s *proxy.Server, dataDir string, meter metric.Meter, log *slog.Logger) (func(), error) {
	// With a shared database, each receiver is fed by one proxy at a time
	// (a lease), from a cursor in the database: no receiver gets every
	// event once per proxy, and the export moves on when its proxy dies.
	leases, shared := s.Store().(store.Leases)
	cursors, ok := s.Store().(store.ExportCursors)
	shared = shared && ok
	opts := auditexport.Options{DataDir: dataDir, MaxBackoff: c.MaxBackoff, Logger: log}
	if shared {
		opts.Cursors = auditexport.StoreCursors{Store: cursors}
	}
	var xs []*auditexport.Exporter
	for _, sink := range c.sinks() {
		x, err := auditexport.New(s.Audit, sink, opts)
		if err != nil {
			return nil, err
		}
		xs = append(xs, x)
	}
	if err := auditexport.RegisterMetrics(meter, xs...); err != nil {
		return nil, fmt.Errorf("audit export metrics: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, x := range xs {
		if !shared {
			wg.Go(func() { x.Run(ctx) })
			continue
		}
		wg.Go(func() {
			for ctx.Err() == nil {
				_ = leases.Hold(ctx, "audit-export/"+x.Name(), func(ctx context.Context) {
					log.Info("audit export: this proxy holds the export's lease", "sink", x.Name())
					x.Run(ctx)
				})
			}
		})
	}
	if c.Retention > 0 {
		r := &auditexport.Retention{Store: s.Audit, Audit: s.Audit, Keep: c.Retention, Exports: xs,
			Logger: log.With("component", "audit-retention")}
		wg.Go(func() { r.Run(ctx) })
	}
	return func() { cancel(); wg.Wait() }, nil
}

// auditExportStatus prints, for limen proxy status, the oldest event kept
// and each export's cursor and lag: from the cursor files in dataDir, so
// that it needs none of the proxy's flags, or from the database when the
// proxies share one (shared is then its cursors).
func auditExportStatus(ctx context.Context, out io.Writer, st *audit.Store, dataDir string, shared store.ExportCursors) error {
	sp, err := st.Span(ctx)
	if err != nil {
		return err
	}
	if sp.Oldest.IsZero() {
		fmt.Fprintln(out, "  oldest event kept: (none)")
	} else {
		fmt.Fprintf(out, "  oldest event kept: %s (%s ago)\n", sp.Oldest.UTC().Format(time.RFC3339), time.Since(sp.Oldest).Round(time.Second))
	}
	type cursor struct {
		name string
		read func() (int64, error)
	}
	var cursors []cursor
	if shared != nil {
		for _, name := range []string{auditexport.NewFile("").Name(), (&auditexport.Webhook{}).Name()} {
			c := auditexport.StoreCursors{Store: shared}
			cursors = append(cursors, cursor{name, func() (int64, error) { return c.Read(ctx, name) }})
		}
	} else {
		paths, _ := filepath.Glob(filepath.Join(auditexport.CursorDir(dataDir), "*.cursor"))
		sort.Strings(paths)
		for _, p := range paths {
			cursors = append(cursors, cursor{strings.TrimSuffix(filepath.Base(p), ".cursor"), func() (int64, error) { return auditexport.ReadCursor(p) }})
		}
	}
	for _, c := range cursors {
		seq, err := c.read()
		if err != nil {
			fmt.Fprintf(out, "Audit export %s: %v\n", c.name, err)
			continue
		}
		if shared != nil && seq == 0 {
			continue // never exported to this kind of receiver
		}
		lag, err := auditexport.LagOf(ctx, st, seq)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "Audit export %s: delivered through event %d, %d behind", c.name, seq, lag.Events)
		if !lag.Oldest.IsZero() {
			fmt.Fprintf(out, ", oldest waiting since %s (%s)", lag.Oldest.UTC().Format(time.RFC3339), time.Since(lag.Oldest).Round(time.Second))
		}
		fmt.Fprintln(out)
	}
	return nil
}
