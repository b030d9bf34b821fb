package decode

import (
	"errors"
	"net/http"
	"testing"

	"github.com/limenhq/limen/gateway/stream"
)

func TestForResponse(t *testing.T) {
	tests := []struct {
		name          string
		hdr           map[string]string
		wantTransport string
		wantErr       bool
	}{
		{"ws v5", map[string]string{"Upgrade": "websocket", "Sec-WebSocket-Protocol": "v5.channel.k8s.io"}, "websocket", false},
		{"ws v4", map[string]string{"Upgrade": "WebSocket", "Sec-WebSocket-Protocol": "v4.channel.k8s.io"}, "websocket", false},
		{"spdy tunnel", map[string]string{"Upgrade": "websocket", "Sec-WebSocket-Protocol": "SPDY/3.1+portforward.k8s.io"}, "websocket", false},
		{"spdy exec", map[string]string{"Upgrade": "SPDY/3.1", "X-Stream-Protocol-Version": "v4.channel.k8s.io"}, "spdy", false},
		{"spdy port-forward", map[string]string{"Upgrade": "SPDY/3.1", "X-Stream-Protocol-Version": "portforward.k8s.io"}, "spdy", false},
		{"ws base64", map[string]string{"Upgrade": "websocket", "Sec-WebSocket-Protocol": "base64.channel.k8s.io"}, "", true},
		{"ws without protocol", map[string]string{"Upgrade": "websocket"}, "", true},
		{"spdy without protocol", map[string]string{"Upgrade": "SPDY/3.1"}, "", true},
		{"h2c", map[string]string{"Upgrade": "h2c"}, "", true},
		{"no upgrade", map[string]string{}, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hdr := http.Header{}
			for k, v := range tc.hdr {
				hdr.Set(k, v)
			}
			p, err := ForResponse(hdr, stream.NopHandler{})
			if tc.wantErr {
				if err == nil {
					t.Fatalf("accepted %v", tc.hdr)
				}
				return
			}
			if err != nil || p.Transport != tc.wantTransport || p.Client == nil || p.Server == nil {
				t.Fatalf("got %+v, %v", p, err)
			}
		})
	}
	if _, err := ForResponse(http.Header{}, stream.NopHandler{}); !errors.Is(err, ErrNotUpgraded) {
		t.Errorf("no upgrade: %v, want ErrNotUpgraded", err)
	}
}
