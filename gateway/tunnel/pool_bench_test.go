package tunnel

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"
)

// BenchmarkPoolRequest is what one small request costs through a proxy
// (open a stream, 200 bytes each way over loopback TLS 1.3, close) when the
// worker keeps one tunnel (to the proxy it enrolled with) or three (one per
// proxy of a three-proxy set). With three, the request lands on a proxy the
// worker reached through its advertised address, not the enrolled one:
// the case a proxy-to-proxy forward would have paid an extra hop for.
func BenchmarkPoolRequest(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("tunnels=%d", n), func(b *testing.B) {
			pki := newPKI(b)
			peers := &MemPeers{TTL: time.Hour}
			var ps []*peerProxy
			for i := range n {
				ps = append(ps, startPeerProxy(b, pki, peers, fmt.Sprintf("p%d", i), "127.0.0.1:0"))
			}
			pool := newPool(b, pki, ps[0].addr(), echo)
			startPool(b, pool)
			for _, p := range ps {
				eventually(b, "a tunnel to "+p.srv.ID, func() bool { return p.srv.Connected("c1") })
			}
			srv := ps[n-1].srv
			req := make([]byte, 200)
			resp := make([]byte, len(req))
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				c, err := srv.Open(ctx, "c1")
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, resp); err != nil {
					b.Fatal(err)
				}
				_ = c.Close()
			}
		})
	}
}
