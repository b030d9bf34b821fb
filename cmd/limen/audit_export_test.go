package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/auditexport"
)

// TestAuditExportConfig: the export and retention keys, from flag and
// environment, and each refusal names its key.
func TestAuditExportConfig(t *testing.T) {
	dir := t.TempDir()
	hook := filepath.Join(dir, "webhook.kubeconfig")
	os.WriteFile(hook, []byte(`apiVersion: v1
kind: Config
clusters: [{name: siem, cluster: {server: "https://127.0.0.1:9443/audit"}}]
users: [{name: limen, user: {token: t}}]
contexts: [{name: d, context: {cluster: siem, user: limen}}]
current-context: d
`), 0o600)
	plain := filepath.Join(dir, "plain.kubeconfig")
	os.WriteFile(plain, []byte(`apiVersion: v1
kind: Config
clusters: [{name: siem, cluster: {server: "http://127.0.0.1:9443/audit"}}]
contexts: [{name: d, context: {cluster: siem}}]
current-context: d
`), 0o600)
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		want  string
		check func(t *testing.T, c auditExportConfig)
	}{
		{name: "defaults: no export, keep forever", check: func(t *testing.T, c auditExportConfig) {
			if c.File != "" || c.Webhook != nil || c.Retention != 0 || c.MaxBackoff != time.Minute {
				t.Errorf("defaults %+v", c)
			}
		}},
		{name: "everything", args: []string{"--audit-export-file", filepath.Join(dir, "audit.jsonl"), "--audit-webhook-config", hook,
			"--audit-retention", "90d"}, check: func(t *testing.T, c auditExportConfig) {
			if c.Webhook == nil || c.Retention != 90*24*time.Hour || len(c.sinks()) != 2 {
				t.Errorf("config %+v", c)
			}
		}},
		{name: "retention from env", env: map[string]string{"LIMEN_AUDIT_RETENTION": "720h"}, check: func(t *testing.T, c auditExportConfig) {
			if c.Retention != 720*time.Hour {
				t.Errorf("retention %s", c.Retention)
			}
		}},
		{name: "retention garbage", env: map[string]string{"LIMEN_AUDIT_RETENTION": "forever"}, want: `audit-retention "forever"`},
		{name: "retention too short", args: []string{"--audit-retention", "5m"}, want: "audit-retention"},
		{name: "retention negative", args: []string{"--audit-retention", "-1h"}, want: "audit-retention"},
		{name: "export file in a missing directory", args: []string{"--audit-export-file", "/nonexistent/dir/audit.jsonl"}, want: "audit-export-file"},
		{name: "export file a directory", args: []string{"--audit-export-file", dir}, want: "audit-export-file"},
		{name: "webhook config missing", args: []string{"--audit-webhook-config", filepath.Join(dir, "nope")}, want: "audit-webhook-config"},
		{name: "webhook over http", args: []string{"--audit-webhook-config", plain}, want: "audit-webhook-config"},
		{name: "backoff", args: []string{"--audit-export-max-backoff", "10ms"}, want: "audit-export-max-backoff"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			root := newRootCmd()
			var got proxyConfig
			var cfgErr error
			p, _, _ := root.Find([]string{"proxy"})
			p.RunE = func(cmd *cobra.Command, _ []string) error {
				got, cfgErr = loadProxyConfig(cmd)
				return nil
			}
			root.SetArgs(append([]string{"proxy", "--data-dir", dir}, tt.args...))
			if err := root.Execute(); err != nil {
				t.Fatal(err)
			}
			if tt.want != "" {
				if cfgErr == nil || !strings.Contains(cfgErr.Error(), tt.want) {
					t.Fatalf("error %v, want one naming %q", cfgErr, tt.want)
				}
				return
			}
			if cfgErr != nil {
				t.Fatal(cfgErr)
			}
			tt.check(t, got.AuditExport)
		})
	}
}

// TestAuditExportStatus: limen proxy status shows the oldest event kept
// and how far each export's cursor is behind.
func TestAuditExportStatus(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := audit.Open(ctx, audit.Path(dir), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	oldest := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range 5 {
		if err := st.Emit(ctx, audit.Event{Type: audit.TypeAuthDenied, Time: oldest.Add(time.Duration(i) * time.Hour),
			Denied: &audit.Denied{Hop: audit.HopProxy, Action: audit.ActionKube, Reason: "test"}}); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	if err := auditexport.WriteCursor(auditexport.CursorPath(dir, "webhook"), 2); err != nil {
		t.Fatal(err)
	}
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"proxy", "status", "--data-dir", dir})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"oldest event kept: 2026-01-02T03:04:05Z",
		"Audit export webhook: delivered through event 2, 3 behind, oldest waiting since 2026-01-02T05:04:05Z"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("proxy status does not say %q:\n%s", want, out.String())
		}
	}
}
