package ws_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/limenhq/limen/gateway/stream"
	"github.com/limenhq/limen/gateway/stream/internal/capture"
	"github.com/limenhq/limen/gateway/stream/spdy"
	wsdec "github.com/limenhq/limen/gateway/stream/ws"
)

// FuzzDecoder feeds arbitrary bytes in every mode and direction: the decoder
// must not panic, and the events and the verdict must not depend on where the
// bytes were split.
func FuzzDecoder(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.client")
	more, _ := filepath.Glob("testdata/*.server")
	for i, name := range append(files, more...) {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(i), uint16(len(b)/2))
	}
	f.Fuzz(func(t *testing.T, data []byte, sel uint8, cut uint16) {
		mode := []wsdec.Mode{wsdec.ModeChannelV4, wsdec.ModeChannelV5, wsdec.ModeSPDYTunnel}[int(sel)%3]
		dir := stream.Direction(int(sel/3) % 2)
		k := int(cut) % (len(data) + 1)
		whole, errWhole := fuzzDecode(t, mode, dir, data, nil)
		split, errSplit := fuzzDecode(t, mode, dir, data, []int{k})
		if whole != split || (errWhole == nil) != (errSplit == nil) {
			t.Fatalf("split at %d changed the result:\nwhole (%v):\n%s\nsplit (%v):\n%s", k, errWhole, whole, errSplit, split)
		}
	})
}

func fuzzDecode(t *testing.T, mode wsdec.Mode, dir stream.Direction, data []byte, cuts []int) (string, error) {
	log := &capture.Log{}
	cfg := wsdec.Config{Mode: mode, Direction: dir, Handler: log}
	var closeTunnel func() error
	if mode == wsdec.ModeSPDYTunnel {
		s, err := spdy.NewSession(spdy.ProtocolPortForward, log, spdy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		tun := s.Client()
		if dir == stream.ServerToClient {
			tun = s.Server()
		}
		cfg.Tunnel, closeTunnel = tun, tun.Close
	}
	d, err := wsdec.NewDecoder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := capture.Feed(d, data, cuts); err != nil {
		return log.String(), err
	}
	if err := d.Close(); err != nil {
		return log.String(), err
	}
	if closeTunnel != nil {
		return log.String(), closeTunnel()
	}
	return log.String(), nil
}
