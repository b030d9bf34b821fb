package spdy_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/limenhq/limen/gateway/stream/internal/capture"
	"github.com/limenhq/limen/gateway/stream/spdy"
)

var fuzzProtocols = []string{spdy.ProtocolV4, spdy.ProtocolPortForward, spdy.ProtocolV1}

// FuzzDecoder decodes arbitrary client and server bytes: it must not panic,
// and neither the events nor the verdict may depend on where the bytes were
// split.
func FuzzDecoder(f *testing.F) {
	names, _ := filepath.Glob("testdata/*.proto")
	for _, name := range names {
		g := capture.Golden(f, strings.TrimSuffix(filepath.Base(name), ".proto"), nil)
		sel := uint8(0)
		if g.Protocol == spdy.ProtocolPortForward {
			sel = 1
		}
		f.Add(g.Client, g.Server, sel, uint16(len(g.Client)/3), uint16(len(g.Server)/2))
	}
	f.Fuzz(func(t *testing.T, client, server []byte, sel uint8, cc, sc uint16) {
		g := capture.Session{Protocol: fuzzProtocols[int(sel)%len(fuzzProtocols)], Client: client, Server: server}
		whole, errWhole := decode(t, g, nil, nil)
		split, errSplit := decode(t, g, []int{int(cc) % (len(client) + 1)}, []int{int(sc) % (len(server) + 1)})
		if whole != split || (errWhole == nil) != (errSplit == nil) {
			t.Fatalf("splitting changed the result:\nwhole (%v):\n%s\nsplit (%v):\n%s", errWhole, whole, errSplit, split)
		}
	})
}
