package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/bytesize"
	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/recstore"
	"github.com/limenhq/limen/gateway/store"
	"github.com/limenhq/limen/gateway/worker"
)

// Size limits of what the proxy and the worker keep on disk (DESIGN.md §2:
// full is a refusal, never a silent cut), and the status commands that show
// their use.

// parseBytes reads the size setting key: a byte count, plain or with a
// Kubernetes suffix (Ki, Mi, Gi, Ti), of at least min bytes.
func parseBytes(key, s string, min int64) (int64, error) {
	q, err := resource.ParseQuantity(s)
	n, exact := q.AsInt64()
	if err != nil || !exact {
		return 0, fmt.Errorf("%s %q: want a whole number of bytes such as 1073741824, 512Mi or 10Gi", key, s)
	}
	if n < min {
		return 0, fmt.Errorf("%s %q: below the minimum of %s; set --%s or %s to %s or more",
			key, s, recording.FormatBytes(min), key, envName(key), recording.FormatBytes(min))
	}
	return n, nil
}

// envName is the environment variable of a configuration key.
func envName(key string) string {
	return "LIMEN_" + strings.ToUpper(strings.ReplaceAll(key, "-", "_"))
}

// proxyStorage is the proxy's size limits, where it keeps recordings and
// for how long.
type proxyStorage struct {
	AuditMaxBytes, RecordingStoreMaxBytes int64
	// RecordingStore is the recording store's URL; empty is the directory
	// in the data directory.
	RecordingStore string
	// RecordingRetention is how long recordings are kept (0: forever).
	RecordingRetention time.Duration
}

// minRecordingRetention guards against a retention given in the wrong
// unit deleting recordings as they arrive.
const minRecordingRetention = time.Hour

func addProxyStorageFlags(f *pflag.FlagSet) {
	f.String("audit-max-bytes", "10Gi", "size limit of the audit database; when it is full, every request is refused "+
		"(nothing goes unaudited) until old events are deleted or the limit is raised")
	f.String("recording-store-max-bytes", "100Gi", "size limit of the recording store; when it is full, uploads are refused "+
		"and recordings wait in the workers' spools (a directory store only; an s3:// bucket is bounded by its quota and lifecycle rules)")
	addRecordingStoreFlag(f)
	f.Duration("recording-retention", 0, "delete recordings older than this, checked at start and hourly, each run audited as one recording.retention event (default: keep forever; at least 1h)")
}

// addRecordingStoreFlag adds recording-store, for the proxy and for the
// commands that read its recordings.
func addRecordingStoreFlag(f *pflag.FlagSet) {
	f.String(recstore.URLKey, "", "where recordings are stored: file:///ABSOLUTE/DIR, or s3://BUCKET?endpoint=URL&region=R&use_path_style=true "+
		"with credentials from the AWS environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ~/.aws); default: file://DATA-DIR/recordings")
}

// proxyHostConfig reads what a command run beside the proxy needs: its
// configuration, its data directory and its stores' limits.
func proxyHostConfig(cmd *cobra.Command) (*viper.Viper, string, proxyStorage, error) {
	v, err := loadConfig(cmd)
	if err != nil {
		return nil, "", proxyStorage{}, err
	}
	dir, err := statusDataDir(v, "proxy")
	if err != nil {
		return nil, "", proxyStorage{}, err
	}
	limits, err := loadProxyStorage(v)
	return v, dir, limits, err
}

func loadProxyStorage(v *viper.Viper) (proxyStorage, error) {
	var c proxyStorage
	var err error
	if c.AuditMaxBytes, err = parseBytes("audit-max-bytes", v.GetString("audit-max-bytes"), audit.MinMaxBytes); err != nil {
		return c, err
	}
	if c.RecordingStoreMaxBytes, err = parseBytes("recording-store-max-bytes", v.GetString("recording-store-max-bytes"), 1<<20); err != nil {
		return c, err
	}
	c.RecordingStore = v.GetString(recstore.URLKey)
	if s := c.RecordingStore; s != "" && !strings.HasPrefix(s, "file://") && !strings.HasPrefix(s, "s3://") {
		return c, fmt.Errorf("%s: want file:///ABSOLUTE/DIR or s3://BUCKET?endpoint=…&region=…; set --%s or %s", recstore.URLKey, recstore.URLKey, envName(recstore.URLKey))
	}
	c.RecordingRetention = v.GetDuration("recording-retention")
	if r := c.RecordingRetention; r != 0 && r < minRecordingRetention {
		return c, fmt.Errorf("recording-retention %s: below the minimum of %s (0 keeps recordings forever); set --recording-retention or LIMEN_RECORDING_RETENTION, for example 2160h for 90 days", r, minRecordingRetention)
	}
	return c, nil
}

func addWorkerSpoolFlag(f *pflag.FlagSet) {
	f.String("recording-spool-max-bytes", "10Gi", "size limit of the spool of recordings waiting for upload; when it is full, "+
		"new exec and attach sessions are refused and the sessions being recorded are ended (at least recording-max-bytes)")
}

// loadWorkerSpool reads recording-spool-max-bytes, which must hold one
// recording at its cap.
func loadWorkerSpool(v *viper.Viper, recordingMax int64) (int64, error) {
	n, err := parseBytes("recording-spool-max-bytes", v.GetString("recording-spool-max-bytes"), recording.MinMaxBytes)
	if err == nil && n < recordingMax {
		err = fmt.Errorf("recording-spool-max-bytes %s is below recording-max-bytes %s: a spool must hold one recording at its cap; "+
			"raise recording-spool-max-bytes or lower recording-max-bytes", recording.FormatBytes(n), recording.FormatBytes(recordingMax))
	}
	return n, err
}

func newProxyStatusCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show how much of its size limit the audit database and the recording store use (on the proxy host)",
		Long: `Show how much of its size limit each store of the proxy uses, read from
--data-dir alongside a running proxy. Pass the same limits (or --config) as
the proxy. A store at its limit is marked FULL, with what the proxy refuses
and what to do.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, dir, limits, err := proxyHostConfig(cmd)
			if err != nil {
				return err
			}
			dbc, err := loadDatabaseConfig(v)
			if err != nil {
				return err
			}
			if dbc.URL != "" {
				return proxyStatusDB(cmd.Context(), cmd.OutOrStdout(), dbc, dir, limits)
			}
			return proxyStatus(cmd.Context(), cmd.OutOrStdout(), dir, limits)
		},
	}
	f := cmd.Flags()
	f.String("data-dir", "", "the proxy's data directory")
	addProxyStorageFlags(f)
	addDatabaseFlags(f)
	return cmd
}

// proxyStatusDB is proxyStatus with the audit trail in the proxies'
// database.
func proxyStatusDB(ctx context.Context, out io.Writer, dbc databaseConfig, dir string, limits proxyStorage) error {
	b, err := dbc.backend(ctx, dir)
	if err != nil {
		return err
	}
	defer b.Close()
	db, err := b.Audit(ctx, true)
	if err != nil {
		return err
	}
	st, err := audit.New(ctx, db, audit.Options{ReadOnly: true, MaxBytes: limits.AuditMaxBytes})
	if err != nil {
		return err
	}
	defer st.Close()
	if err := printAuditUsage(ctx, out, st, db.Location()); err != nil {
		return err
	}
	cursors, _ := b.(store.ExportCursors)
	if err := auditExportStatus(ctx, out, st, dir, cursors); err != nil {
		return err
	}
	return recordingStoreStatus(ctx, out, dir, limits)
}

// proxyStatus prints the use of the audit database and the recording store
// in dir against limits.
func proxyStatus(ctx context.Context, out io.Writer, dir string, limits proxyStorage) error {
	st, err := audit.Open(ctx, audit.Path(dir), audit.Options{ReadOnly: true, MaxBytes: limits.AuditMaxBytes})
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("no audit database at %s: is --data-dir the proxy's data directory, and has the proxy run?", audit.Path(dir))
	}
	if err != nil {
		return err
	}
	defer st.Close()
	if err := printAuditUsage(ctx, out, st, audit.Path(dir)); err != nil {
		return err
	}
	if err := auditExportStatus(ctx, out, st, dir, nil); err != nil {
		return err
	}
	return recordingStoreStatus(ctx, out, dir, limits)
}

func printAuditUsage(ctx context.Context, out io.Writer, st *audit.Store, where string) error {
	u, err := st.Usage(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Audit database:  %s\n", where)
	fmt.Fprintf(out, "  %s, %d events, file %s\n", useLine(u.Used, u.Max), u.Events, bytesize.Approx(u.File))
	if u.Used >= u.Max {
		fmt.Fprintln(out, "  FULL: the proxy refuses every request until old events are deleted or audit-max-bytes is raised")
	}
	return nil
}

// recordingStoreStatus prints where the recordings are, how much they use
// (of the limit, for a directory) and the oldest kept.
func recordingStoreStatus(ctx context.Context, out io.Writer, dir string, limits proxyStorage) error {
	rs, err := recstore.OpenURL(ctx, limits.RecordingStore, recstore.URLOptions{DataDir: dir, ReadOnly: true})
	if errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(out, "Recording store: %s (none yet)\n", recstore.Path(dir))
		return nil
	}
	if err != nil {
		return err
	}
	defer rs.Close()
	ru, err := rs.Usage()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Recording store: %s\n", rs.Location())
	if !rs.Limited() {
		fmt.Fprintf(out, "  %s in %d recordings (no limit here: the bucket's quota and lifecycle rules bound it)\n", bytesize.Approx(ru.Used), ru.Recordings)
	} else {
		fmt.Fprintf(out, "  %s, %d recordings\n", useLine(ru.Used, limits.RecordingStoreMaxBytes), ru.Recordings)
		if ru.Used >= limits.RecordingStoreMaxBytes {
			fmt.Fprintln(out, "  FULL: uploads are refused and recordings wait in the workers' spools until old recordings are deleted or recording-store-max-bytes is raised")
		}
	}
	retention := "keep forever"
	if limits.RecordingRetention > 0 {
		retention = "delete after " + limits.RecordingRetention.String()
	}
	if oldest, ok, err := rs.Oldest(); err != nil {
		return err
	} else if ok {
		fmt.Fprintf(out, "  oldest kept: %s, session %s (%s old; retention: %s)\n", oldest.Time.UTC().Format(time.RFC3339), oldest.ID,
			time.Since(oldest.Time).Round(time.Minute), retention)
	} else {
		fmt.Fprintf(out, "  oldest kept: none (retention: %s)\n", retention)
	}
	return nil
}

func newWorkerStatusCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show how much of its size limit the worker's recording spool uses (on the worker's host)",
		Long: `Show how much of its size limit the worker's recording spool uses, read
from --data-dir alongside a running worker, and how many recordings wait for
upload. Pass the same limit (or --config) as the worker.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			dir, err := statusDataDir(v, "worker")
			if err != nil {
				return err
			}
			limit, err := loadWorkerSpool(v, 0)
			if err != nil {
				return err
			}
			return workerStatus(cmd.OutOrStdout(), dir, limit)
		},
	}
	f := cmd.Flags()
	f.String("data-dir", "", "the worker's data directory")
	addWorkerSpoolFlag(f)
	return cmd
}

// workerStatus prints the use of the spool in the worker's data directory
// against limit. It only reads: a recording in progress is left alone.
func workerStatus(out io.Writer, dir string, limit int64) error {
	spool := worker.SpoolDir(dir)
	if _, err := os.Stat(spool); err != nil {
		return fmt.Errorf("no recording spool at %s: is --data-dir the worker's data directory, and has the worker run?", spool)
	}
	u, err := recording.SpoolUsageOf(spool, limit)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Recording spool: %s\n", spool)
	fmt.Fprintf(out, "  %s, %d recordings waiting for upload\n", useLine(u.Used, u.Max), u.Pending)
	if u.Used+recording.MinMaxBytes > u.Max {
		fmt.Fprintln(out, "  FULL: new exec and attach sessions are refused until recordings reach the proxy or recording-spool-max-bytes is raised")
	}
	return nil
}

// useLine words the use of a limit: "1.2 GiB in use of 10 GiB (12%)".
func useLine(used, limit int64) string {
	return fmt.Sprintf("%s in use of %s (%d%%)", bytesize.Approx(used), bytesize.Format(limit), bytesize.Percent(used, limit))
}

// statusDataDir returns the data directory a status command reads beside a
// running proxy or worker (who).
func statusDataDir(v *viper.Viper, who string) (string, error) {
	dir := v.GetString("data-dir")
	if dir == "" {
		return "", fmt.Errorf("data-dir: required; set --data-dir or LIMEN_DATA_DIR to the %s's data directory", who)
	}
	return dir, nil
}
