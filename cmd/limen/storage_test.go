package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/recstore"
	"github.com/limenhq/limen/gateway/worker"
)

// TestStorageLimitKeys: each size limit has its default, is read from a
// flag, the environment or the config file, and a value that is not a size,
// or is below its minimum, is refused at start with an error naming the key.
func TestStorageLimitKeys(t *testing.T) {
	dir := t.TempDir()
	yaml := filepath.Join(dir, "limen.yaml")
	if err := os.WriteFile(yaml, []byte("data-dir: "+dir+"\naudit-max-bytes: 2Gi\nrecording-store-max-bytes: 3Gi\n"+
		"proxy: p:1\nkube-cluster: demo\nrecording-spool-max-bytes: 4Gi\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	type limits struct{ audit, store, spool int64 }
	tests := []struct {
		name string
		cmd  string // proxy or worker
		args []string
		env  map[string]string
		want limits
		err  string
	}{
		{name: "proxy defaults", cmd: "proxy", args: []string{"--data-dir", dir}, want: limits{audit: 10 << 30, store: 100 << 30}},
		{name: "worker default", cmd: "worker", args: []string{"--data-dir", dir, "--proxy", "p:1", "--kube-cluster", "demo"}, want: limits{spool: 10 << 30}},
		{name: "flags", cmd: "proxy", args: []string{"--data-dir", dir, "--audit-max-bytes", "512Mi", "--recording-store-max-bytes", "1073741824"},
			want: limits{audit: 512 << 20, store: 1 << 30}},
		{name: "yaml", cmd: "proxy", args: []string{"--config", yaml}, want: limits{audit: 2 << 30, store: 3 << 30}},
		{name: "worker yaml", cmd: "worker", args: []string{"--config", yaml}, want: limits{spool: 4 << 30}},
		{name: "env over yaml", cmd: "proxy", args: []string{"--config", yaml},
			env: map[string]string{"LIMEN_AUDIT_MAX_BYTES": "5Gi", "LIMEN_RECORDING_STORE_MAX_BYTES": "6Gi"}, want: limits{audit: 5 << 30, store: 6 << 30}},
		{name: "worker env", cmd: "worker", args: []string{"--config", yaml}, env: map[string]string{"LIMEN_RECORDING_SPOOL_MAX_BYTES": "7Gi"},
			want: limits{spool: 7 << 30}},
		{name: "audit not a size", cmd: "proxy", args: []string{"--data-dir", dir, "--audit-max-bytes", "lots"}, err: "audit-max-bytes"},
		{name: "audit below minimum", cmd: "proxy", args: []string{"--data-dir", dir, "--audit-max-bytes", "1Ki"}, err: "audit-max-bytes \"1Ki\": below the minimum of 1 MiB"},
		{name: "store zero", cmd: "proxy", args: []string{"--data-dir", dir, "--recording-store-max-bytes", "0"}, err: "recording-store-max-bytes"},
		{name: "spool bad env", cmd: "worker", args: []string{"--config", yaml}, env: map[string]string{"LIMEN_RECORDING_SPOOL_MAX_BYTES": "1GiB"},
			err: "recording-spool-max-bytes"},
		{name: "spool smaller than a recording", cmd: "worker", args: []string{"--config", yaml, "--recording-spool-max-bytes", "512Mi"},
			err: "recording-spool-max-bytes 512 MiB is below recording-max-bytes 1 GiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			root := newRootCmd()
			c, _, _ := root.Find([]string{tt.cmd})
			var got limits
			var cfgErr error
			c.RunE = func(cmd *cobra.Command, _ []string) error {
				if tt.cmd == "proxy" {
					var pc proxyConfig
					pc, cfgErr = loadProxyConfig(cmd)
					got.audit, got.store = pc.Storage.AuditMaxBytes, pc.Storage.RecordingStoreMaxBytes
				} else {
					var wc workerConfig
					wc, cfgErr = loadWorkerConfig(cmd)
					got.spool = wc.RecordingSpoolMaxBytes
				}
				return nil
			}
			root.SetArgs(append([]string{tt.cmd}, tt.args...))
			if err := root.Execute(); err != nil {
				t.Fatal(err)
			}
			if tt.err != "" {
				if cfgErr == nil || !strings.Contains(cfgErr.Error(), tt.err) {
					t.Fatalf("error %v, want one with %q", cfgErr, tt.err)
				}
				return
			}
			if cfgErr != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, cfgErr, tt.want)
			}
		})
	}
}

// TestStorageStatus: limen proxy status and limen worker status show each
// store's use against its limit, and mark a full one with what is refused.
func TestStorageStatus(t *testing.T) {
	ctx := context.Background()
	proxyDir := t.TempDir()
	st, err := audit.Open(ctx, audit.Path(proxyDir), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Emit(ctx, audit.Event{Type: audit.TypeAuthDenied, Time: time.Now(),
		Denied: &audit.Denied{Hop: audit.HopProxy, Action: audit.ActionKube, Reason: "test"}}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	run := func(args ...string) string {
		t.Helper()
		root := newRootCmd()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("limen %s: %v", strings.Join(args, " "), err)
		}
		return out.String()
	}
	out := run("proxy", "status", "--data-dir", proxyDir)
	for _, want := range []string{"Audit database:  " + audit.Path(proxyDir), "in use of 10 GiB (0%), 1 events", "Recording store: ", "(none yet)"} {
		if !strings.Contains(out, want) {
			t.Errorf("proxy status does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "FULL") {
		t.Errorf("an empty store is marked full:\n%s", out)
	}
	// Filled to a 1 MiB limit, the database is marked full under it.
	st, err = audit.Open(ctx, audit.Path(proxyDir), audit.Options{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	filler := audit.Event{Type: audit.TypeAuthDenied, Time: time.Now(),
		Denied: &audit.Denied{Hop: audit.HopProxy, Action: audit.ActionKube, Reason: strings.Repeat("filler ", 100)}}
	for i := 0; ; i++ {
		err := st.Emit(ctx, filler)
		if errors.Is(err, audit.ErrFull) {
			break
		}
		if err != nil || i == 100000 {
			t.Fatalf("filling a 1 MiB audit database: %v after %d events, want ErrFull", err, i)
		}
	}
	st.Close()
	out = run("proxy", "status", "--data-dir", proxyDir, "--audit-max-bytes", "1Mi")
	if !strings.Contains(out, "1.0 MiB in use of 1 MiB (100%)") || !strings.Contains(out, "FULL: the proxy refuses every request") {
		t.Errorf("a full audit database is not marked full:\n%s", out)
	}

	// One recording of 1.1 MiB, stored as a worker uploads it.
	rs, err := recstore.Open(recstore.Path(proxyDir))
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("r"), 1100<<10)
	sum := sha256.Sum256(data)
	up, offer := rs.Begin("demo", recstore.Header{ID: "rec", Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])})
	if up == nil {
		t.Fatal(offer.Reason)
	}
	if _, err := up.ReadFrom(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if r := up.Commit(); r.Status != recstore.Stored {
		t.Fatal(r.Reason)
	}
	up.Close()
	out = run("proxy", "status", "--data-dir", proxyDir)
	if !strings.Contains(out, "1.1 MiB in use of 100 GiB (0%), 1 recordings") {
		t.Errorf("proxy status does not show the recording:\n%s", out)
	}
	out = run("proxy", "status", "--data-dir", proxyDir, "--recording-store-max-bytes", "1Mi")
	if !strings.Contains(out, "(107%)") || !strings.Contains(out, "FULL: uploads are refused and recordings wait in the workers' spools") {
		t.Errorf("a full recording store is not marked full:\n%s", out)
	}

	workerDir := t.TempDir()
	spool, err := recording.OpenSpool(worker.SpoolDir(workerDir))
	if err != nil {
		t.Fatal(err)
	}
	f, err := spool.Create("waiting")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(bytes.Repeat([]byte("x"), 100<<10)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	out = run("worker", "status", "--data-dir", workerDir)
	for _, want := range []string{"Recording spool: " + worker.SpoolDir(workerDir), "100.1 KiB in use of 10 GiB (0%), 1 recordings waiting for upload"} {
		if !strings.Contains(out, want) {
			t.Errorf("worker status does not say %q:\n%s", want, out)
		}
	}
	out = run("worker", "status", "--data-dir", workerDir, "--recording-spool-max-bytes", "128Ki")
	if !strings.Contains(out, "(78%)") || !strings.Contains(out, "FULL: new exec and attach sessions are refused") {
		t.Errorf("a spool without room for a session is not marked full:\n%s", out)
	}
}
