package main

import (
	"strings"
	"testing"
	"time"
)

// TestWorkerShutdownFlags: the drain's bounds default to 25 s and a 5 s
// handover, take durations from flags and the environment, read a zero
// handover as "do not wait", and refuse at start, naming the key, a
// timeout that is not positive or bounded and a handover as long as the
// timeout.
func TestWorkerShutdownFlags(t *testing.T) {
	base := []string{"--data-dir", t.TempDir(), "--proxy", "p:1", "--kube-cluster", "demo"}
	tests := []struct {
		name              string
		args              []string
		env               string // LIMEN_SHUTDOWN_TIMEOUT
		timeout, handover time.Duration
		err               string
	}{
		{name: "default", timeout: 25 * time.Second, handover: 5 * time.Second},
		{name: "flags", args: []string{"--shutdown-timeout", "1m", "--shutdown-handover", "10s"}, timeout: time.Minute, handover: 10 * time.Second},
		{name: "environment", env: "40s", timeout: 40 * time.Second, handover: 5 * time.Second},
		{name: "no handover", args: []string{"--shutdown-handover", "0s"}, timeout: 25 * time.Second, handover: -1},
		{name: "zero timeout", args: []string{"--shutdown-timeout", "0s"}, err: "shutdown-timeout"},
		{name: "negative timeout", args: []string{"--shutdown-timeout", "-5s"}, err: "shutdown-timeout"},
		{name: "an hour", args: []string{"--shutdown-timeout", "1h"}, err: "shutdown-timeout"},
		{name: "not a duration", env: "soon", err: "shutdown-timeout"},
		{name: "handover as long as the timeout", args: []string{"--shutdown-timeout", "5s", "--shutdown-handover", "5s"}, err: "shutdown-handover"},
		{name: "negative handover", args: []string{"--shutdown-handover", "-1s"}, err: "shutdown-handover"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv("LIMEN_SHUTDOWN_TIMEOUT", tt.env)
			}
			got, cfgErr := workerConfigFrom(t, append(base, tt.args...))
			if tt.err != "" {
				if cfgErr == nil || !strings.Contains(cfgErr.Error(), tt.err) {
					t.Fatalf("error %v, want one naming %q", cfgErr, tt.err)
				}
				return
			}
			if cfgErr != nil {
				t.Fatal(cfgErr)
			}
			if got.ShutdownTimeout != tt.timeout || got.Handover != tt.handover {
				t.Fatalf("shutdown timeout %s, handover %s; want %s, %s", got.ShutdownTimeout, got.Handover, tt.timeout, tt.handover)
			}
		})
	}
}
