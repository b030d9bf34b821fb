package ws_test

import (
	"bytes"
	"testing"

	"github.com/gobwas/ws"

	"github.com/limenhq/limen/gateway/stream"
	wsdec "github.com/limenhq/limen/gateway/stream/ws"
)

// BenchmarkDecoder reports the decoder's throughput on 32 KiB stdout messages
// (server, unmasked) and stdin messages (client, masked: unmasking copies).
func BenchmarkDecoder(b *testing.B) {
	payload := bytes.Repeat([]byte("0123456789abcdef"), 2<<10)
	for _, bc := range []struct {
		name   string
		client bool
		ch     byte
	}{{"server-stdout", false, 1}, {"client-stdin", true, 0}} {
		b.Run(bc.name, func(b *testing.B) {
			var buf bytes.Buffer
			for range 32 {
				buf.Write(frame(true, ws.OpBinary, bc.client, append([]byte{bc.ch}, payload...)))
			}
			in := buf.Bytes()
			d := newDecoder(b, wsdec.ModeChannelV4, bc.client, stream.NopHandler{})
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				for off := 0; off < len(in); off += 16 << 10 { // relay-sized reads
					if _, err := d.Write(in[off:min(off+16<<10, len(in))]); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
