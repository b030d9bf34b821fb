package decode

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/gobwas/ws"
	mspdy "github.com/moby/spdystream/spdy"

	"github.com/limenhq/limen/gateway/stream"
)

// spdyWire encodes SPDY frames for one direction of a port-forward: the
// SYN_STREAM of a data stream for port 5432 (client only), then data frames
// of 32 KiB.
func spdyWire(b *testing.B, client bool, frames int) []byte {
	var buf bytes.Buffer
	f, err := mspdy.NewFramer(&buf, nil)
	if err != nil {
		b.Fatal(err)
	}
	if client {
		h := http.Header{}
		h.Set("streamType", "data")
		h.Set("port", "5432")
		if err := f.WriteFrame(&mspdy.SynStreamFrame{StreamId: 1, Headers: h}); err != nil {
			b.Fatal(err)
		}
	}
	payload := bytes.Repeat([]byte("0123456789abcdef"), 2<<10)
	for range frames {
		if err := f.WriteFrame(&mspdy.DataFrame{StreamId: 1, Data: payload}); err != nil {
			b.Fatal(err)
		}
	}
	return buf.Bytes()
}

// inWebSocket wraps SPDY bytes in binary WebSocket messages of at most 32
// KiB, masked when the client sends them, as kubectl's SPDY-in-WebSocket
// tunnel does.
func inWebSocket(b *testing.B, spdy []byte, client bool) []byte {
	var buf bytes.Buffer
	for off := 0; off < len(spdy); off += 32 << 10 {
		p := bytes.Clone(spdy[off:min(off+32<<10, len(spdy))])
		h := ws.Header{Fin: true, OpCode: ws.OpBinary, Length: int64(len(p))}
		if client {
			h.Masked, h.Mask = true, [4]byte{0xa1, 0xb2, 0xc3, 0xd4}
			ws.Cipher(p, h.Mask, 0)
		}
		if err := ws.WriteHeader(&buf, h); err != nil {
			b.Fatal(err)
		}
		buf.Write(p)
	}
	return buf.Bytes()
}

// BenchmarkPortForward reports the decoders' cost on port-forward data in
// both directions over SPDY and SPDY in WebSocket, fed in the worker
// relay's 64 KiB reads. Allocations per op must stay flat with the frame
// count: a port-forward decodes without allocating per frame.
func BenchmarkPortForward(b *testing.B) {
	const frames = 64
	for _, tc := range []struct {
		name string
		hdr  map[string]string
	}{
		{"spdy", map[string]string{"Upgrade": "SPDY/3.1", "X-Stream-Protocol-Version": "portforward.k8s.io"}},
		{"spdy-in-websocket", map[string]string{"Upgrade": "websocket", "Sec-WebSocket-Protocol": "SPDY/3.1+portforward.k8s.io"}},
	} {
		hdr := http.Header{}
		for k, v := range tc.hdr {
			hdr.Set(k, v)
		}
		ws := tc.name != "spdy"
		for _, dir := range []string{"up", "down"} {
			b.Run(tc.name+"/"+dir, func(b *testing.B) {
				p, err := ForResponse(hdr, stream.NopHandler{})
				if err != nil {
					b.Fatal(err)
				}
				// The client's SYN_STREAM opens the stream for both ways.
				syn := spdyWire(b, true, 0)
				if ws {
					syn = inWebSocket(b, syn, true)
				}
				if _, err := p.Client.Write(syn); err != nil {
					b.Fatal(err)
				}
				dec, client := p.Server, false
				if dir == "up" {
					dec, client = p.Client, true
				}
				in := spdyWire(b, false, frames)
				if ws {
					in = inWebSocket(b, in, client)
				}
				b.SetBytes(int64(len(in)))
				b.ReportAllocs()
				for b.Loop() {
					for off := 0; off < len(in); off += 64 << 10 {
						if _, err := dec.Write(in[off:min(off+64<<10, len(in))]); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}
