package grant

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/limenhq/limen/gateway/internal/strictjson"
)

// Request is one stream's own facts, sent in the preamble right after the
// grant. It is not signed: the grant is the decision, which the proxy
// reuses for many requests, and these fields only label the stream. Only
// the proxy can open a tunnel stream (the worker dialled it and verified its
// certificate), and whoever could forge a Request there could as well send
// the grant's own requests; a Request never widens what the grant allows.
type Request struct {
	// SessionID is random and unguessable (NewSessionID); the worker puts it
	// in Impersonate-Extra-limen-session and in every audit event.
	SessionID string `json:"sid"`
	// ClientAddr is the caller's address as the proxy saw it (host:port).
	ClientAddr string `json:"client_addr"`
	// TraceParent is the W3C traceparent of the proxy's span, or empty.
	TraceParent string `json:"traceparent,omitempty"`
}

// MaxRequestSize bounds an encoded Request.
const MaxRequestSize = 1 << 10

// Validate checks every field's shape.
func (r Request) Validate() error {
	switch {
	case !validSessionID(r.SessionID):
		return fmt.Errorf("session id %q is not 32 lowercase hex characters", clip(r.SessionID))
	case len(r.ClientAddr) > 256 || !printableASCII(r.ClientAddr):
		return fmt.Errorf("client address %q is too long or not printable ASCII", clip(r.ClientAddr))
	case r.TraceParent != "" && !ValidTraceParent(r.TraceParent):
		return fmt.Errorf("traceparent %q is not a W3C version-00 traceparent", clip(r.TraceParent))
	}
	return nil
}

// WriteRequest writes r after the grant preamble: its JSON's length as a
// 4-byte big-endian integer, then the JSON.
func WriteRequest(w io.Writer, r Request) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("write request preamble: %w", err)
	}
	body, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("write request preamble: %w", err)
	}
	if len(body) > MaxRequestSize {
		return fmt.Errorf("write request preamble: %d bytes, over the %d-byte limit", len(body), MaxRequestSize)
	}
	return writeBlob(w, body, "request preamble")
}

// writeBlob writes b as a 4-byte big-endian length and the bytes, in one
// Write.
func writeBlob(w io.Writer, b []byte, what string) error {
	buf := make([]byte, preambleHeader+len(b))
	binary.BigEndian.PutUint32(buf, uint32(len(b)))
	copy(buf[preambleHeader:], b)
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("write %s: %w", what, err)
	}
	return nil
}

// ReadRequest reads the Request that follows the grant preamble, exactly
// its bytes and no more. It decodes strictly: unknown fields, trailing bytes
// and invalid fields are refused, wrapping ErrPreamble.
func ReadRequest(rd io.Reader) (Request, error) {
	body, err := readBlob(rd, MaxRequestSize, "request preamble")
	if err != nil {
		return Request{}, err
	}
	var r Request
	if err := strictjson.Unmarshal(body, &r); err != nil {
		return Request{}, fmt.Errorf("read request preamble: %v: %w", err, ErrPreamble)
	}
	if err := r.Validate(); err != nil {
		return Request{}, fmt.Errorf("read request preamble: %v: %w", err, ErrPreamble)
	}
	return r, nil
}

// readBlob reads a 4-byte big-endian length and that many bytes, refusing a
// length of 0 or over max before allocating. Errors about the bytes wrap
// ErrPreamble; transport errors are wrapped as they are.
func readBlob(r io.Reader, max int, what string) ([]byte, error) {
	var hdr [preambleHeader]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("read %s: stream ended inside the length prefix: %w", what, ErrPreamble)
		}
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || uint64(n) > uint64(max) {
		return nil, fmt.Errorf("read %s: length %d, want 1 to %d: %w", what, n, max, ErrPreamble)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("read %s: stream ended inside the %d-byte body: %w", what, n, ErrPreamble)
		}
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	return b, nil
}
