package sessions

import (
	"net/url"
	"testing"

	"github.com/limenhq/limen/gateway/kreq"
)

func TestKindOf(t *testing.T) {
	tests := []struct {
		info  kreq.Info
		query string
		kind  Kind
		ok    bool
	}{
		{kreq.Info{Verb: "create", Resource: "pods", Subresource: "exec", Namespace: "ns", Name: "p"}, "container=c", KindExec, true},
		{kreq.Info{Verb: "get", Resource: "pods", Subresource: "attach", Namespace: "ns", Name: "p"}, "", KindAttach, true},
		{kreq.Info{Verb: "create", Resource: "pods", Subresource: "portforward", Namespace: "ns", Name: "p"}, "", KindPortForward, true},
		{kreq.Info{Verb: "watch", Resource: "configmaps", Namespace: "ns"}, "watch=true", KindWatch, true},
		{kreq.Info{Verb: "get", Resource: "pods", Subresource: "log", Namespace: "ns", Name: "p"}, "follow=true", KindLogs, true},
		{kreq.Info{Verb: "get", Resource: "pods", Subresource: "log", Namespace: "ns", Name: "p"}, "", "", false},
		{kreq.Info{Verb: "list", Resource: "pods", Namespace: "ns"}, "", "", false},
	}
	for _, tt := range tests {
		q, _ := url.ParseQuery(tt.query)
		kind, _, ok := KindOf(tt.info, q)
		if kind != tt.kind || ok != tt.ok {
			t.Errorf("KindOf(%+v, %q) = %q %v, want %q %v", tt.info, tt.query, kind, ok, tt.kind, tt.ok)
		}
	}
}
