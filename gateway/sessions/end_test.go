package sessions

import (
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
)

// TestCompleteEnd: one session.end tells the whole story. The proxy's reason
// replaces the worker's only where the worker saw no more than its client
// side going away; the worker's facts always stay.
func TestCompleteEnd(t *testing.T) {
	ended := time.Now()
	tests := []struct {
		name       string
		info       Info
		worker     string // the worker's end_reason
		wantReason string
		wantHop    string
		wantDetail string
		noExit     bool // the worker saw no exit status (port-forward, watch, logs)
	}{
		{"proxy lock, worker saw its client close", Info{End: ended, Reason: ReasonLocked, Detail: "user alice is locked by user:admin: incident 42"},
			audit.EndClientClosed, audit.EndLocked, audit.HopProxy, "user alice is locked by user:admin: incident 42", false},
		{"proxy kill, worker saw the tunnel go", Info{End: ended, Reason: ReasonKilled},
			audit.EndTunnelClosed, audit.EndKilled, audit.HopProxy, "", false},
		{"proxy expiry", Info{End: ended, Reason: ReasonExpired}, audit.EndClientClosed, audit.EndExpired, audit.HopProxy, "", false},
		{"proxy shutdown", Info{End: ended, Reason: ReasonShutdown}, audit.EndClientClosed, audit.EndShutdown, audit.HopProxy, "", false},
		// A shell exits 0 when the cut reaches its stdin: the exit came
		// after the lock, which ended a stream still open at the proxy.
		{"proxy lock, the shell exited as its stdin closed", Info{End: ended, Reason: ReasonLocked, Detail: "incident 42"},
			audit.EndCompleted, audit.EndLocked, audit.HopProxy, "incident 42", false},
		{"the command completed before the proxy's end", Info{End: ended, Reason: ReasonCompleted}, audit.EndCompleted, audit.EndCompleted, audit.HopWorker, "", false},
		{"proxy lock, a port-forward's clean close reached the worker", Info{End: ended, Reason: ReasonLocked, Detail: "incident 42"},
			audit.EndCompleted, audit.EndLocked, audit.HopProxy, "incident 42", true},
		{"a truncation is the worker's finding", Info{End: ended, Reason: ReasonKilled}, audit.EndTruncated, audit.EndTruncated, audit.HopWorker, "", false},
		{"the worker's own lock", Info{End: ended, Reason: ReasonClientClosed}, audit.EndLocked, audit.EndLocked, audit.HopWorker, "", false},
		{"the user hung up", Info{End: ended, Reason: ReasonClientClosed}, audit.EndClientClosed, audit.EndClientClosed, audit.HopWorker, "", false},
		{"still live at the proxy", Info{}, audit.EndClientClosed, audit.EndClientClosed, audit.HopWorker, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code := 7
			exit := &code
			if tt.noExit {
				exit = nil
			}
			end := audit.Session{Kind: AuditKind, Login: "exec", ExitCode: exit, BytesIn: 3, BytesOut: 5,
				RecordingSHA256: "abc", EndReason: tt.worker, EndHop: audit.HopWorker}
			tt.info.CompleteEnd(&end)
			if end.EndReason != tt.wantReason || end.EndHop != tt.wantHop || end.EndDetail != tt.wantDetail {
				t.Fatalf("end %q by %q (%q), want %q by %q (%q)", end.EndReason, end.EndHop, end.EndDetail,
					tt.wantReason, tt.wantHop, tt.wantDetail)
			}
			if (end.ExitCode == nil) != tt.noExit || (exit != nil && *end.ExitCode != 7) || end.BytesIn != 3 || end.BytesOut != 5 || end.RecordingSHA256 != "abc" {
				t.Fatalf("the worker's facts changed: %+v", end)
			}
		})
	}
}
