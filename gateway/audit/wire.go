package audit

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/limenhq/limen/gateway/internal/strictjson"
)

// MaxWireSize bounds one encoded event on the wire. Events carry no bodies,
// so anything larger is a bug or an attack.
const MaxWireSize = 64 << 10

// ErrWire is wrapped by every ReadEvent or DecodeEvent error that is about
// the bytes received rather than the transport.
var ErrWire = errors.New("bad audit event on the wire")

const wireHeader = 4

// EncodeEvent validates e and returns its JSON encoding.
func EncodeEvent(e Event) ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("encode audit event: %w", err)
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode audit event: %w", err)
	}
	if len(b) > MaxWireSize {
		return nil, fmt.Errorf("encode audit event: %d bytes, over the %d-byte limit: %w", len(b), MaxWireSize, ErrInvalid)
	}
	return b, nil
}

// DecodeEvent decodes one JSON event strictly: unknown fields, trailing
// bytes and events that fail Validate are refused (ErrWire).
func DecodeEvent(b []byte) (Event, error) {
	if len(b) > MaxWireSize {
		return Event{}, fmt.Errorf("decode audit event: %d bytes, over the %d-byte limit: %w", len(b), MaxWireSize, ErrWire)
	}
	var e Event
	if err := strictjson.Unmarshal(b, &e); err != nil {
		return Event{}, fmt.Errorf("decode audit event: %v: %w", err, ErrWire)
	}
	if err := e.Validate(); err != nil {
		return Event{}, fmt.Errorf("decode audit event: %v: %w", err, ErrWire)
	}
	return e, nil
}

// WriteEvent writes e to w as one frame: a 4-byte big-endian length, then
// the JSON encoding, in a single Write.
func WriteEvent(w io.Writer, e Event) error {
	b, err := EncodeEvent(e)
	if err != nil {
		return err
	}
	frame := make([]byte, wireHeader+len(b))
	binary.BigEndian.PutUint32(frame, uint32(len(b)))
	copy(frame[wireHeader:], b)
	if _, err := w.Write(frame); err != nil {
		return fmt.Errorf("write audit event: %w", err)
	}
	return nil
}

// ReadEvent reads one frame written by WriteEvent. It reads exactly the
// frame's bytes, so what follows on the stream (the response) is left
// unread. A length over max (or over MaxWireSize; max <= 0 means
// MaxWireSize) is refused before anything is allocated. A stream that ends
// cleanly before the frame returns io.EOF.
func ReadEvent(r io.Reader, max int) (Event, error) {
	if max <= 0 || max > MaxWireSize {
		max = MaxWireSize
	}
	var hdr [wireHeader]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if err == io.EOF {
			return Event{}, io.EOF
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return Event{}, fmt.Errorf("read audit event: stream ended inside the length prefix: %w", ErrWire)
		}
		return Event{}, fmt.Errorf("read audit event: %w", err)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || uint64(n) > uint64(max) {
		return Event{}, fmt.Errorf("read audit event: length %d, want 1 to %d: %w", n, max, ErrWire)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return Event{}, fmt.Errorf("read audit event: stream ended inside the %d-byte event: %w", n, ErrWire)
		}
		return Event{}, fmt.Errorf("read audit event: %w", err)
	}
	return DecodeEvent(b)
}
