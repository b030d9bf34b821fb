package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/limenhq/limen/gateway/impersonate"
)

// TestWorkerRecordingMaxBytes: the recording cap defaults to 1 GiB, takes
// plain byte counts and Kubernetes suffixes from a flag, the environment or
// the config file, and a value that is not a size or below the minimum is
// refused at start with an error naming the key.
func TestWorkerRecordingMaxBytes(t *testing.T) {
	base := []string{"--data-dir", t.TempDir(), "--proxy", "p:1", "--kube-cluster", "demo"}
	tests := []struct {
		name string
		args []string
		env  string // LIMEN_RECORDING_MAX_BYTES
		want int64
		err  string
	}{
		{name: "default", want: 1 << 30},
		{name: "plain bytes", args: []string{"--recording-max-bytes", "1048576"}, want: 1 << 20},
		{name: "suffix", args: []string{"--recording-max-bytes", "64Mi"}, want: 64 << 20},
		{name: "decimal suffix", args: []string{"--recording-max-bytes", "2G"}, want: 2e9},
		{name: "from the environment", env: "512Ki", want: 512 << 10},
		{name: "minimum", args: []string{"--recording-max-bytes", "64Ki"}, want: 64 << 10},
		{name: "below the minimum", args: []string{"--recording-max-bytes", "65535"}, err: "recording-max-bytes"},
		{name: "zero", args: []string{"--recording-max-bytes", "0"}, err: "recording-max-bytes"},
		{name: "negative", args: []string{"--recording-max-bytes", "-1Gi"}, err: "recording-max-bytes"},
		{name: "fraction of a byte", args: []string{"--recording-max-bytes", "100m"}, err: "recording-max-bytes"},
		{name: "not a size", args: []string{"--recording-max-bytes", "lots"}, err: "recording-max-bytes"},
		{name: "empty", args: []string{"--recording-max-bytes", ""}, err: "recording-max-bytes"},
		{name: "bad environment", env: "1GiB", err: "recording-max-bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv("LIMEN_RECORDING_MAX_BYTES", tt.env)
			}
			got, cfgErr := workerConfigFrom(t, append(base, tt.args...))
			if tt.err != "" {
				if cfgErr == nil || !strings.Contains(cfgErr.Error(), tt.err) {
					t.Fatalf("error %v, want one naming %q", cfgErr, tt.err)
				}
				return
			}
			if cfgErr != nil || got.RecordingMaxBytes != tt.want {
				t.Fatalf("got %d, %v; want %d", got.RecordingMaxBytes, cfgErr, tt.want)
			}
		})
	}
}

// workerConfigFrom is the worker's configuration as `limen worker args…`
// loads it, without running the worker.
func workerConfigFrom(t *testing.T, args []string) (workerConfig, error) {
	t.Helper()
	root := newRootCmd()
	worker, _, _ := root.Find([]string{"worker"})
	var got workerConfig
	var cfgErr error
	worker.RunE = func(cmd *cobra.Command, _ []string) error {
		got, cfgErr = loadWorkerConfig(cmd)
		return nil
	}
	root.SetArgs(append([]string{"worker"}, args...))
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	return got, cfgErr
}

// TestWorkerKubeUserPrefix: --kube-user-prefix and --kube-impersonation come
// from a flag, the environment or the config file, default to bare names
// and legacy impersonation, and a prefix that would put users among
// "system:" names (or bots' names), or an unknown mode, is refused at start
// with an error naming the key.
func TestWorkerKubeUserPrefix(t *testing.T) {
	base := []string{"--data-dir", t.TempDir(), "--proxy", "p:1", "--kube-cluster", "demo"}
	tests := []struct {
		name   string
		args   []string
		env    map[string]string
		config string // YAML
		prefix string
		mode   impersonate.Mode
		err    string
	}{
		{name: "default", mode: impersonate.ModeLegacy},
		{name: "flag", args: []string{"--kube-user-prefix", "limen:"}, prefix: "limen:", mode: impersonate.ModeLegacy},
		{name: "environment", env: map[string]string{"LIMEN_KUBE_USER_PREFIX": "corp-", "LIMEN_KUBE_IMPERSONATION": "constrained"},
			prefix: "corp-", mode: impersonate.ModeConstrained},
		{name: "config file", config: "kube-user-prefix: \"limen:\"\nkube-impersonation: constrained\n",
			prefix: "limen:", mode: impersonate.ModeConstrained},
		{name: "flag over environment", args: []string{"--kube-user-prefix", "a:"}, env: map[string]string{"LIMEN_KUBE_USER_PREFIX": "b:"},
			prefix: "a:", mode: impersonate.ModeLegacy},
		{name: "system: prefix", args: []string{"--kube-user-prefix", "system:"}, err: "kube-user-prefix"},
		{name: "system: prefix from the environment", env: map[string]string{"LIMEN_KUBE_USER_PREFIX": "system:limen:"}, err: "kube-user-prefix"},
		{name: "bot: prefix", args: []string{"--kube-user-prefix", "bot:"}, err: "kube-user-prefix"},
		{name: "white space", args: []string{"--kube-user-prefix", "limen "}, err: "kube-user-prefix"},
		{name: "control byte", args: []string{"--kube-user-prefix", "limen\r\n"}, err: "kube-user-prefix"},
		{name: "unknown mode", args: []string{"--kube-impersonation", "strict"}, err: "kube-impersonation"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			args := append([]string{"worker"}, base...)
			if tt.config != "" {
				path := filepath.Join(t.TempDir(), "limen.yaml")
				if err := os.WriteFile(path, []byte(tt.config), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--config", path)
			}
			root := newRootCmd()
			worker, _, _ := root.Find([]string{"worker"})
			var got impersonate.Config
			var cfgErr error
			worker.RunE = func(cmd *cobra.Command, _ []string) error {
				v, err := loadConfig(cmd)
				if err != nil {
					return err
				}
				got, cfgErr = loadWorkerImpersonation(v)
				return nil
			}
			root.SetArgs(append(args, tt.args...))
			if err := root.Execute(); err != nil {
				t.Fatal(err)
			}
			if tt.err != "" {
				if cfgErr == nil || !strings.HasPrefix(cfgErr.Error(), tt.err+":") {
					t.Fatalf("error %v, want one starting with %q", cfgErr, tt.err)
				}
				return
			}
			if cfgErr != nil || got.UserPrefix != tt.prefix || got.Mode != tt.mode {
				t.Fatalf("got %+v, %v; want prefix %q, mode %s", got, cfgErr, tt.prefix, tt.mode)
			}
		})
	}
}

// TestWorkerRefusesThePrefixBeforeEnrolling: a refused prefix stops the
// worker before it spends its one-time join token (the proxy address here
// cannot be dialled, so an attempt to enroll would fail otherwise).
func TestWorkerRefusesThePrefixBeforeEnrolling(t *testing.T) {
	dir := t.TempDir()
	root := newRootCmd()
	root.SetArgs([]string{"worker", "--data-dir", dir, "--proxy", "127.0.0.1:1", "--kube-cluster", "demo",
		"--join-token", "not-a-token", "--kube-user-prefix", "system:limen:"})
	err := root.Execute()
	if err == nil || !strings.HasPrefix(err.Error(), "kube-user-prefix:") {
		t.Fatalf("limen worker: %v, want the refusal of kube-user-prefix before anything else", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("the refused worker wrote %v into its data directory", entries)
	}
}
