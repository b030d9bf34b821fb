package spdy_test

import (
	"bytes"
	"testing"

	"github.com/limenhq/limen/gateway/stream"
	"github.com/limenhq/limen/gateway/stream/spdy"
)

// BenchmarkDecoder reports the server decoder's throughput on 32 KiB stdout
// data frames, fed in relay-sized 16 KiB writes.
func BenchmarkDecoder(b *testing.B) {
	c := newWire(b).syn(1, "streamType", "stdout")
	srv := newWire(b)
	payload := string(bytes.Repeat([]byte("0123456789abcdef"), 2<<10))
	for range 32 {
		srv.data(1, false, payload)
	}
	in := srv.buf.Bytes()
	s, err := spdy.NewSession(spdy.ProtocolV4, stream.NopHandler{}, spdy.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.Client().Write(c.buf.Bytes()); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		for off := 0; off < len(in); off += 16 << 10 {
			if _, err := s.Server().Write(in[off:min(off+16<<10, len(in))]); err != nil {
				b.Fatal(err)
			}
		}
	}
}
