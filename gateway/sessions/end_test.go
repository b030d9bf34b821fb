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
	}{
		{"proxy lock, worker saw its client close", Info{End: ended, Reason: ReasonLocked, Detail: "user alice is locked by user:admin: incident 42"},
			audit.EndClientClosed, audit.EndLocked, audit.HopProxy, "user alice is locked by user:admin: incident 42"},
		{"proxy kill, worker saw the tunnel go", Info{End: ended, Reason: ReasonKilled},
			audit.EndTunnelClosed, audit.EndKilled, audit.HopProxy, ""},
		{"proxy expiry", Info{End: ended, Reason: ReasonExpired}, audit.EndClientClosed, audit.EndExpired, audit.HopProxy, ""},
		{"proxy shutdown", Info{End: ended, Reason: ReasonShutdown}, audit.EndClientClosed, audit.EndShutdown, audit.HopProxy, ""},
		{"the command completed first", Info{End: ended, Reason: ReasonLocked}, audit.EndCompleted, audit.EndCompleted, audit.HopWorker, ""},
		{"a truncation is the worker's finding", Info{End: ended, Reason: ReasonKilled}, audit.EndTruncated, audit.EndTruncated, audit.HopWorker, ""},
		{"the worker's own lock", Info{End: ended, Reason: ReasonClientClosed}, audit.EndLocked, audit.EndLocked, audit.HopWorker, ""},
		{"the user hung up", Info{End: ended, Reason: ReasonClientClosed}, audit.EndClientClosed, audit.EndClientClosed, audit.HopWorker, ""},
		{"still live at the proxy", Info{}, audit.EndClientClosed, audit.EndClientClosed, audit.HopWorker, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code := 7
			end := audit.Session{Kind: AuditKind, Login: "exec", ExitCode: &code, BytesIn: 3, BytesOut: 5,
				RecordingSHA256: "abc", EndReason: tt.worker, EndHop: audit.HopWorker}
			tt.info.CompleteEnd(&end)
			if end.EndReason != tt.wantReason || end.EndHop != tt.wantHop || end.EndDetail != tt.wantDetail {
				t.Fatalf("end %q by %q (%q), want %q by %q (%q)", end.EndReason, end.EndHop, end.EndDetail,
					tt.wantReason, tt.wantHop, tt.wantDetail)
			}
			if *end.ExitCode != 7 || end.BytesIn != 3 || end.BytesOut != 5 || end.RecordingSHA256 != "abc" {
				t.Fatalf("the worker's facts changed: %+v", end)
			}
		})
	}
}
