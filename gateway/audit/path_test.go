package audit

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestRequestPath(t *testing.T) {
	long := "/" + strings.Repeat("a", 2*MaxRequestPath)
	tests := []struct{ in, want string }{
		{"/k8s/dev/api/v1/pods?watch=true&labelSelector=secret", "/k8s/dev/api/v1/pods"},
		{"/api/v1/pods#frag?x", "/api/v1/pods"},
		{"/a/../b", "/a/../b"}, // refused paths are recorded as sent
		{"", "/"},
		{"?token=abc", "/"},
		{"/bad\xff\xfe", "/bad\uFFFD"},
		{long, long[:MaxRequestPath]},
	}
	for _, tt := range tests {
		got := RequestPath(tt.in)
		if got != tt.want {
			t.Errorf("RequestPath(%.40q) = %.40q, want %.40q", tt.in, got, tt.want)
		}
		if !utf8.ValidString(got) || strings.ContainsAny(got, "?#") {
			t.Errorf("RequestPath(%.40q) = %.40q: not valid UTF-8 or carries a query", tt.in, got)
		}
		// A kube.request with this path must pass validation.
		if err := (&KubeRequest{Method: "GET", Path: got}).validate(); err != nil {
			t.Errorf("RequestPath(%.40q) fails validation: %v", tt.in, err)
		}
	}
}
