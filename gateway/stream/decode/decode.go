// Package decode picks the passive decoders for an upgraded Kubernetes
// stream from the protocol the server agreed to, so the relay can tee each
// direction's bytes into them.
package decode

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/limenhq/limen/gateway/stream"
	"github.com/limenhq/limen/gateway/stream/spdy"
	"github.com/limenhq/limen/gateway/stream/ws"
)

// Decoder is one direction's decoder: Write is fed a copy of the bytes (before
// they are relayed), Close is called when that direction ends.
type Decoder interface {
	Write(p []byte) (int, error)
	// Close reports an error when decoding failed or the bytes stopped
	// inside a frame.
	Close() error
	// Pending is how many of the bytes written so far belong to a frame
	// (or a fragmented WebSocket message) that is not complete yet.
	Pending() int64
}

// Pair holds the decoders of both directions of one upgraded connection.
type Pair struct {
	// Client decodes client → server bytes; Server decodes server → client bytes.
	Client, Server Decoder
	// Transport is "websocket" or "spdy"; Protocol is the agreed subprotocol.
	Transport, Protocol string

	failure func(message string) []byte
}

// Failure returns the server → client bytes that end an exec or attach
// stream with a failure status carrying message, for a relay to insert at
// a frame boundary of the server's bytes (where Server.Pending is zero) in
// place of a status the server never sent: the client then reports the
// message and exits non-zero instead of taking a cut stream for success.
// It is nil when the protocol has no place for it (port-forward) or the
// stream is already past it.
func (p *Pair) Failure(message string) []byte {
	if p.failure == nil {
		return nil
	}
	return p.failure(message)
}

// ErrNotUpgraded is returned for a response that did not switch protocols.
var ErrNotUpgraded = errors.New("response did not upgrade to WebSocket or SPDY/3.1")

// ForResponse returns the decoders for a 101 response's headers, reporting to
// h (which both directions call, possibly concurrently). A protocol that
// cannot be decoded is an error: the stream must then be ended.
func ForResponse(hdr http.Header, h stream.Handler) (*Pair, error) {
	upgrade := strings.ToLower(strings.TrimSpace(hdr.Get("Upgrade")))
	switch upgrade {
	case "websocket":
		return forWebSocket(hdr.Get("Sec-WebSocket-Protocol"), h)
	case "spdy/3.1":
		p := hdr.Get("X-Stream-Protocol-Version")
		s, err := spdy.NewSession(p, h, spdy.Options{})
		if err != nil {
			return nil, err
		}
		return &Pair{Client: s.Client(), Server: s.Server(), Transport: "spdy", Protocol: p, failure: s.Failure}, nil
	}
	return nil, fmt.Errorf("%w (Upgrade: %q)", ErrNotUpgraded, upgrade)
}

func forWebSocket(protocol string, h stream.Handler) (*Pair, error) {
	mode, err := ws.ModeFor(protocol)
	if err != nil {
		return nil, err
	}
	cc := ws.Config{Mode: mode, Direction: stream.ClientToServer, Handler: h}
	sc := ws.Config{Mode: mode, Direction: stream.ServerToClient, Handler: h}
	var tunnel *spdy.Session
	if mode == ws.ModeSPDYTunnel {
		if tunnel, err = spdy.NewSession(spdy.ProtocolPortForward, h, spdy.Options{}); err != nil {
			return nil, err
		}
		cc.Tunnel, sc.Tunnel = tunnel.Client(), tunnel.Server()
	}
	c, err := ws.NewDecoder(cc)
	if err != nil {
		return nil, err
	}
	s, err := ws.NewDecoder(sc)
	if err != nil {
		return nil, err
	}
	p := &Pair{Client: c, Server: s, Transport: "websocket", Protocol: protocol, failure: s.Failure}
	if tunnel != nil {
		p.Client = chain{c, tunnel.Client()}
		p.Server = chain{s, tunnel.Server()}
	}
	return p, nil
}

// chain is a WebSocket decoder whose payloads feed a SPDY decoder: writes go
// to the first, Close ends both.
type chain struct {
	outer, inner Decoder
}

func (c chain) Write(p []byte) (int, error) { return c.outer.Write(p) }

// Pending is the WebSocket layer's: the relay cuts between WebSocket frames.
func (c chain) Pending() int64 { return c.outer.Pending() }

func (c chain) Close() error {
	return errors.Join(c.outer.Close(), c.inner.Close())
}
