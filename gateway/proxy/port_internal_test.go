package proxy

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestSampledLog: a burst of refused connections makes one log line, and
// the next line says how many were not logged.
func TestSampledLog(t *testing.T) {
	var buf bytes.Buffer
	l := &sampledLog{log: slog.New(slog.NewTextHandler(&buf, nil)), every: time.Hour}
	for range 1000 {
		l.note("connection refused", "remote", "192.0.2.1:1")
	}
	if n := strings.Count(buf.String(), "connection refused"); n != 1 {
		t.Fatalf("%d log lines for a burst of 1000, want 1:\n%s", n, buf.String())
	}
	l.last = time.Now().Add(-2 * time.Hour) // the hour has passed
	l.note("connection refused", "remote", "192.0.2.1:2")
	if !strings.Contains(buf.String(), "also_since_last_log=999") {
		t.Fatalf("the second line does not count the 999 unlogged:\n%s", buf.String())
	}
}
