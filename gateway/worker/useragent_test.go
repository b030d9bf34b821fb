package worker

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/limenhq/limen/gateway/audit"
)

func TestClipUserAgent(t *testing.T) {
	long := strings.Repeat("a", audit.MaxUserAgent-1) + "é" // é straddles the cut
	for _, tt := range []struct{ in, want string }{
		{"", ""},
		{"kubectl/v1.35.0 (linux/amd64)", "kubectl/v1.35.0 (linux/amd64)"},
		{strings.Repeat("b", audit.MaxUserAgent), strings.Repeat("b", audit.MaxUserAgent)},
		{strings.Repeat("b", audit.MaxUserAgent+1), strings.Repeat("b", audit.MaxUserAgent)},
		{long, strings.Repeat("a", audit.MaxUserAgent-1)},
	} {
		got := clipUserAgent(tt.in)
		if got != tt.want || len(got) > audit.MaxUserAgent || !utf8.ValidString(got) && utf8.ValidString(tt.in) {
			t.Errorf("clipUserAgent(%d bytes) = %d bytes %q", len(tt.in), len(got), got)
		}
	}
}
