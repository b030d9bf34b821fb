package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
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
			root := newRootCmd()
			worker, _, _ := root.Find([]string{"worker"})
			var got workerConfig
			var cfgErr error
			worker.RunE = func(cmd *cobra.Command, _ []string) error {
				got, cfgErr = loadWorkerConfig(cmd)
				return nil
			}
			root.SetArgs(append(append([]string{"worker"}, base...), tt.args...))
			if err := root.Execute(); err != nil {
				t.Fatal(err)
			}
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
