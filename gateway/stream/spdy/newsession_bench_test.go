package spdy_test

import (
	"testing"

	"github.com/limenhq/limen/gateway/stream"
	"github.com/limenhq/limen/gateway/stream/spdy"
)

// BenchmarkNewSession shows the fixed cost of a session: each direction's
// spdystream framer also builds a zlib writer it never uses here.
func BenchmarkNewSession(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := spdy.NewSession(spdy.ProtocolV4, stream.NopHandler{}, spdy.Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
