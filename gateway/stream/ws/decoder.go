// Package ws decodes a copy of one direction of a Kubernetes WebSocket stream:
// RFC 6455 frames, then the channel protocols v4.channel.k8s.io and
// v5.channel.k8s.io (exec, attach), or the binary payloads of
// SPDY/3.1+portforward.k8s.io handed to a SPDY decoder.
//
// The decoder is passive: it never answers pings or closes, and it never
// modifies the bytes it is given.
package ws

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/gobwas/ws"

	"github.com/limenhq/limen/gateway/stream"
)

// Subprotocols the decoder understands, as negotiated in Sec-WebSocket-Protocol.
const (
	ProtocolV4         = "v4.channel.k8s.io"
	ProtocolV5         = "v5.channel.k8s.io"
	ProtocolSPDYTunnel = "SPDY/3.1+portforward.k8s.io"
)

// Mode selects what the decoder does with message payloads.
type Mode int

const (
	// ModeChannelV4 is v4.channel.k8s.io: binary messages prefixed by a channel byte.
	ModeChannelV4 Mode = iota + 1
	// ModeChannelV5 is v4 plus the close signal [255, channel].
	ModeChannelV5
	// ModeSPDYTunnel concatenates binary message payloads into Config.Tunnel.
	ModeSPDYTunnel
)

// ModeFor returns the mode for a negotiated subprotocol. Any other protocol
// (including the base64 variants, which Limen never offers) is an error: a
// stream that cannot be decoded must be ended.
func ModeFor(subprotocol string) (Mode, error) {
	switch subprotocol {
	case ProtocolV4:
		return ModeChannelV4, nil
	case ProtocolV5:
		return ModeChannelV5, nil
	case ProtocolSPDYTunnel:
		return ModeSPDYTunnel, nil
	}
	return 0, fmt.Errorf("websocket subprotocol %q cannot be decoded", subprotocol)
}

// Channel numbers of the Kubernetes channel protocol.
const (
	ChannelStdin  = 0
	ChannelStdout = 1
	ChannelStderr = 2
	ChannelError  = 3
	ChannelResize = 4
	ChannelClose  = 255 // v5 only: [255, channel] closes channel
)

// Default limits for the JSON channels.
const (
	DefaultMaxStatus = 64 << 10
	DefaultMaxResize = 4 << 10
)

// Config configures a Decoder.
type Config struct {
	// Mode is the negotiated protocol (see ModeFor).
	Mode Mode
	// Direction is the direction of the bytes given to Write. Client frames
	// must be masked and server frames must not be.
	Direction stream.Direction
	// Handler receives channel events (channel modes).
	Handler stream.Handler
	// Tunnel receives the concatenated binary payloads (ModeSPDYTunnel),
	// typically the same direction's spdy.Decoder.
	Tunnel io.Writer
	// MaxStatus bounds the status channel's JSON; 0 means DefaultMaxStatus.
	MaxStatus int
	// MaxResize bounds one resize object; 0 means DefaultMaxResize.
	MaxResize int
}

// Decoder decodes one direction of a WebSocket connection. It implements
// io.Writer so that a relay can tee a copy of the bytes into it; each Write
// must be given the bytes in order. It is not safe for concurrent use.
type Decoder struct {
	cfg    Config
	frames frameReader
	err    error // sticky: once decoding failed, every Write fails

	channel  int    // channel of the open message, -1 until its first byte
	closeMsg []byte // v5 close signal payload being collected
	status   stream.JSONObjects
	resize   stream.JSONObjects
}

// NewDecoder returns a Decoder for cfg.
func NewDecoder(cfg Config) (*Decoder, error) {
	switch cfg.Mode {
	case ModeChannelV4, ModeChannelV5:
		if cfg.Handler == nil {
			return nil, errors.New("ws decoder: channel mode needs a Handler")
		}
	case ModeSPDYTunnel:
		if cfg.Tunnel == nil {
			return nil, errors.New("ws decoder: SPDY tunnel mode needs a Tunnel writer")
		}
	default:
		return nil, fmt.Errorf("ws decoder: unknown mode %d", cfg.Mode)
	}
	if cfg.Direction != stream.ClientToServer && cfg.Direction != stream.ServerToClient {
		return nil, fmt.Errorf("ws decoder: unknown direction %d", cfg.Direction)
	}
	if cfg.MaxStatus <= 0 {
		cfg.MaxStatus = DefaultMaxStatus
	}
	if cfg.MaxResize <= 0 {
		cfg.MaxResize = DefaultMaxResize
	}
	return &Decoder{
		cfg:    cfg,
		frames: newFrameReader(cfg.Direction == stream.ClientToServer),
		status: stream.JSONObjects{Max: cfg.MaxStatus},
		resize: stream.JSONObjects{Max: cfg.MaxResize},
	}, nil
}

// Write decodes p. It returns len(p) and nil, or 0 and the first decoding or
// Handler error, after which every Write fails with the same error.
func (d *Decoder) Write(p []byte) (int, error) {
	if d.err != nil {
		return 0, d.err
	}
	if err := d.frames.write(p, d); err != nil {
		d.err = fmt.Errorf("websocket %s: %w", d.cfg.Direction, err)
		return 0, d.err
	}
	return len(p), nil
}

// Close reports the end of this direction's bytes. It returns an error if
// decoding failed or the stream stopped in the middle of a frame or message.
func (d *Decoder) Close() error {
	if d.err != nil {
		return d.err
	}
	if d.frames.midFrame() {
		d.err = fmt.Errorf("websocket %s: stream ended inside a frame", d.cfg.Direction)
		return d.err
	}
	return nil
}

// Pending returns how many of the bytes written so far belong to a frame,
// or a fragmented message, that is not complete: a relay that holds these
// back can always cut the stream, or insert a message, between frames.
func (d *Decoder) Pending() int64 { return d.frames.pending() }

// Closed reports whether a close frame was seen.
func (d *Decoder) Closed() bool { return d.frames.closed }

// closeFrame implements messageSink.
func (d *Decoder) closeFrame(ws.StatusCode, string) error {
	if d.cfg.Mode == ModeSPDYTunnel {
		return nil // the SPDY layer reports its own end (GOAWAY)
	}
	return d.cfg.Handler.Close(d.cfg.Direction)
}

// payload implements messageSink.
func (d *Decoder) payload(op ws.OpCode, p []byte, first, last bool) error {
	if op != ws.OpBinary {
		return fmt.Errorf("%s message in a binary-only protocol", opName(op))
	}
	if d.cfg.Mode == ModeSPDYTunnel {
		if len(p) == 0 {
			return nil
		}
		_, err := d.cfg.Tunnel.Write(p)
		return err
	}
	if first {
		d.channel = -1
		d.closeMsg = d.closeMsg[:0]
	}
	if d.channel < 0 && len(p) > 0 {
		d.channel = int(p[0])
		p = p[1:]
		if err := d.openChannel(); err != nil {
			return err
		}
	}
	if err := d.channelData(p); err != nil {
		return err
	}
	if last && d.channel == ChannelClose {
		return d.closeSignal()
	}
	return nil
}

// Failure returns the server → client frames that end a channel-protocol
// stream with a failure Status carrying message on the status channel,
// followed by a normal close so that the client reports the status rather
// than an abnormal closure. It returns
// nil when that is impossible: a SPDY tunnel (no status channel) or a
// stream whose close frame was already seen. The caller must insert the
// frames at a boundary (see Pending).
func (d *Decoder) Failure(message string) []byte {
	if d.cfg.Mode == ModeSPDYTunnel || d.frames.closed {
		return nil
	}
	var b bytes.Buffer
	payload := append([]byte{ChannelError}, stream.FailureStatus(message)...)
	_ = ws.WriteHeader(&b, ws.Header{Fin: true, OpCode: ws.OpBinary, Length: int64(len(payload))})
	b.Write(payload)
	body := ws.NewCloseFrameBody(ws.StatusNormalClosure, "")
	_ = ws.WriteHeader(&b, ws.Header{Fin: true, OpCode: ws.OpClose, Length: int64(len(body))})
	b.Write(body)
	return b.Bytes()
}
