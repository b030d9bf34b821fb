package tunnel

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// MaxFrameSize is the largest control-stream frame payload either side
// accepts or sends. It bounds the memory a hostile or broken peer can make
// the reader allocate for one frame; larger payloads (recordings) must be
// chunked by the caller.
const MaxFrameSize = 1 << 20

// frameHeaderSize is the length prefix: a big-endian uint32 payload length.
const frameHeaderSize = 4

// maxTypeLen bounds Message.Type so a peer cannot use it to bloat logs.
const maxTypeLen = 64

// Frame errors. They are returned wrapped; match with errors.Is.
var (
	ErrFrameTooLarge = errors.New("tunnel: frame exceeds size limit")
	ErrEmptyFrame    = errors.New("tunnel: empty frame")
	ErrBadMessage    = errors.New("tunnel: malformed control message")
)

// ReadFrame reads one length-prefixed frame from r. It never allocates more
// than max bytes (MaxFrameSize if max <= 0) whatever the header claims, and
// a frame cut short returns io.ErrUnexpectedEOF. A clean io.EOF is returned
// only when r ends exactly on a frame boundary.
func ReadFrame(r io.Reader, max int) ([]byte, error) {
	if max <= 0 || max > MaxFrameSize {
		max = MaxFrameSize
	}
	var hdr [frameHeaderSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	switch {
	case n == 0:
		return nil, ErrEmptyFrame
	case uint64(n) > uint64(max):
		return nil, fmt.Errorf("%w: %d > %d bytes", ErrFrameTooLarge, n, max)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}

// WriteFrame writes payload as one length-prefixed frame in a single Write,
// so a frame is never interleaved with another writer's bytes as long as
// writers are serialized.
func WriteFrame(w io.Writer, payload []byte) error {
	if len(payload) == 0 {
		return ErrEmptyFrame
	}
	if len(payload) > MaxFrameSize {
		return fmt.Errorf("%w: %d > %d bytes", ErrFrameTooLarge, len(payload), MaxFrameSize)
	}
	buf := make([]byte, frameHeaderSize+len(payload))
	binary.BigEndian.PutUint32(buf, uint32(len(payload)))
	copy(buf[frameHeaderSize:], payload)
	_, err := w.Write(buf)
	return err
}

// Message types defined by the tunnel itself. Callers define their own
// (for example "lock.set", "session.kill", "audit.batch") in their packages;
// any type not listed here is delivered to the OnMessage hook.
const (
	TypeHello     = "hello"
	TypeHelloAck  = "hello-ack"
	TypeRefused   = "refused"
	TypeHeartbeat = "heartbeat"
)

// Message is one control-stream message. Body is the type-specific payload,
// kept raw so the tunnel needs no knowledge of caller types.
type Message struct {
	// Type names the message; it is required.
	Type string `json:"type"`
	// ID is assigned by the sender's control stream, increasing from 1.
	ID uint64 `json:"id,omitempty"`
	// ReplyTo, when set, names the ID of the message this one answers;
	// such a message completes the matching Request instead of reaching
	// OnMessage.
	ReplyTo uint64 `json:"reply_to,omitempty"`
	// Body is the JSON payload.
	Body json.RawMessage `json:"body,omitempty"`
}

// NewMessage builds a Message of the given type with body encoded as JSON.
func NewMessage(typ string, body any) (Message, error) {
	m := Message{Type: typ}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return Message{}, fmt.Errorf("encode %s body: %w", typ, err)
		}
		m.Body = b
	}
	return m, nil
}

// Reply builds a message of the given type answering m.
func (m Message) Reply(typ string, body any) (Message, error) {
	r, err := NewMessage(typ, body)
	r.ReplyTo = m.ID
	return r, err
}

// Decode unmarshals the body into v.
func (m Message) Decode(v any) error {
	if len(m.Body) == 0 {
		return fmt.Errorf("%w: %s has no body", ErrBadMessage, m.Type)
	}
	if err := json.Unmarshal(m.Body, v); err != nil {
		return fmt.Errorf("%w: %s body: %v", ErrBadMessage, m.Type, err)
	}
	return nil
}

// encodeMessage validates m and returns its frame payload.
func encodeMessage(m Message) ([]byte, error) {
	if err := validType(m.Type); err != nil {
		return nil, err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", m.Type, err)
	}
	return b, nil
}

// decodeMessage parses one frame payload.
func decodeMessage(b []byte) (Message, error) {
	var m Message
	if err := json.Unmarshal(b, &m); err != nil {
		return Message{}, fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	if err := validType(m.Type); err != nil {
		return Message{}, err
	}
	return m, nil
}

func validType(t string) error {
	if t == "" || len(t) > maxTypeLen {
		return fmt.Errorf("%w: type must be 1-%d bytes", ErrBadMessage, maxTypeLen)
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("%w: type has byte %#x", ErrBadMessage, c)
		}
	}
	return nil
}

// Hello is the worker's first message on the control stream.
type Hello struct {
	Cluster  string `json:"cluster"`
	WorkerID string `json:"worker_id"`
	Version  string `json:"version"`
	// Link names the tunnel among the worker's tunnels: the address it
	// dialed. A worker keeps one tunnel per proxy address (Pool), and two
	// of them may land on the same proxy (through the load balancer and
	// directly); the proxy replaces a session only by one of the same
	// worker and link. Empty for a worker with a single tunnel.
	Link string `json:"link,omitempty"`
}

// HelloAck is the proxy's answer to an accepted Hello.
type HelloAck struct {
	// SessionID is the proxy's name for this connection, for correlating logs.
	SessionID string `json:"session_id"`
	// ProxyID names the proxy process that accepted the tunnel (Server.ID),
	// for the worker's logs; empty when the proxy has none.
	ProxyID string `json:"proxy_id,omitempty"`
}

// Refusal is the body of a TypeRefused message, sent by the proxy before it
// closes a session it will not accept.
type Refusal struct {
	Reason string `json:"reason"`
}

// maxHelloField bounds each Hello string.
const maxHelloField = 253

func (h Hello) validate() error {
	for _, f := range []struct{ name, v string }{
		{"cluster", h.Cluster}, {"worker_id", h.WorkerID}, {"version", h.Version}, {"link", h.Link},
	} {
		if f.name != "version" && f.name != "link" && f.v == "" {
			return fmt.Errorf("%w: hello %s is empty", ErrBadMessage, f.name)
		}
		if len(f.v) > maxHelloField {
			return fmt.Errorf("%w: hello %s longer than %d bytes", ErrBadMessage, f.name, maxHelloField)
		}
	}
	return nil
}
