package spdy_test

import (
	"testing"

	"github.com/limenhq/limen/gateway/stream/internal/capture"
	"github.com/limenhq/limen/gateway/stream/spdy"
)

// TestStreamsAreForgotten: after a port-forward request completes, its streams
// leave the table, so a long session with many connections stays under
// MaxStreams.
func TestStreamsAreForgotten(t *testing.T) {
	g := capture.Golden(t, "portforward", nil)
	s, err := spdy.NewSession(g.Protocol, &capture.Log{}, spdy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client().Write(g.Client); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Server().Write(g.Server); err != nil {
		t.Fatal(err)
	}
	if n := s.OpenStreams(); n != 0 {
		t.Errorf("%d streams still tracked after every request completed", n)
	}
}
