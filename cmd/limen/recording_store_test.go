package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/limenhq/limen/gateway/recstore"
)

// TestRecordingStoreKeys: recording-store and recording-retention are read
// from a flag, the environment or the config file, and a value the proxy
// cannot use is refused at start with an error naming the key.
func TestRecordingStoreKeys(t *testing.T) {
	dir := t.TempDir()
	yaml := filepath.Join(dir, "limen.yaml")
	if err := os.WriteFile(yaml, []byte("data-dir: "+dir+"\nrecording-store: s3://from-yaml?region=r\nrecording-retention: 720h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	type got struct {
		store     string
		retention time.Duration
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want got
		err  string
	}{
		{name: "defaults", args: []string{"--data-dir", dir}},
		{name: "flags", args: []string{"--data-dir", dir, "--recording-store", "file:///srv/rec", "--recording-retention", "2160h"},
			want: got{"file:///srv/rec", 2160 * time.Hour}},
		{name: "yaml", args: []string{"--config", yaml}, want: got{"s3://from-yaml?region=r", 720 * time.Hour}},
		{name: "env over yaml", args: []string{"--config", yaml},
			env:  map[string]string{"LIMEN_RECORDING_STORE": "s3://from-env", "LIMEN_RECORDING_RETENTION": "48h"},
			want: got{"s3://from-env", 48 * time.Hour}},
		{name: "scheme", args: []string{"--data-dir", dir, "--recording-store", "/srv/rec"}, err: "recording-store: want file:///ABSOLUTE/DIR or s3://"},
		{name: "retention in the wrong unit", args: []string{"--data-dir", dir, "--recording-retention", "90s"},
			err: "recording-retention 1m30s: below the minimum of 1h0m0s"},
		{name: "retention not a duration", args: []string{"--data-dir", dir, "--recording-retention", "90d"}, err: "recording-retention"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			root := newRootCmd()
			c, _, _ := root.Find([]string{"proxy"})
			var g got
			var cfgErr error
			c.RunE = func(cmd *cobra.Command, _ []string) error {
				var pc proxyConfig
				pc, cfgErr = loadProxyConfig(cmd)
				g = got{pc.Storage.RecordingStore, pc.Storage.RecordingRetention}
				return nil
			}
			root.SetArgs(append([]string{"proxy"}, tt.args...))
			root.SetOut(&bytes.Buffer{})
			root.SetErr(&bytes.Buffer{})
			err := root.Execute()
			if err != nil && tt.err != "" && strings.Contains(err.Error(), tt.err) {
				return // refused while parsing the flag, naming it
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.err != "" {
				if cfgErr == nil || !strings.Contains(cfgErr.Error(), tt.err) {
					t.Fatalf("error %v, want one with %q", cfgErr, tt.err)
				}
				return
			}
			if cfgErr != nil || g != tt.want {
				t.Fatalf("got %+v, %v; want %+v", g, cfgErr, tt.want)
			}
		})
	}
}

// TestProxyStatusOldestKept: limen proxy status names the oldest recording
// kept and the retention.
func TestProxyStatusOldestKept(t *testing.T) {
	dir := t.TempDir()
	rs, err := recstore.Open(recstore.Path(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"old-one", "new-one"} {
		data := []byte("recording " + id + "\n")
		sum := sha256.Sum256(data)
		up, offer := rs.Begin("prod", recstore.Header{ID: id, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])})
		if up == nil {
			t.Fatalf("begin: %+v", offer)
		}
		if _, err := up.ReadFrom(bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		if r := up.Commit(); r.Status != recstore.Stored {
			t.Fatalf("commit: %+v", r)
		}
		up.Close()
	}
	old := time.Now().Add(-48 * time.Hour)
	if err := os.Chtimes(filepath.Join(recstore.Path(dir), "prod", "old-one.cast"), old, old); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	limits := proxyStorage{RecordingStoreMaxBytes: 1 << 30, RecordingRetention: 72 * time.Hour}
	if err := recordingStoreStatus(context.Background(), &out, dir, limits); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Recording store: " + recstore.Path(dir), "2 recordings", "oldest kept: " + old.UTC().Format(time.RFC3339),
		"session old-one", "retention: delete after 72h0m0s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
}
