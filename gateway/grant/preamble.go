package grant

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// ErrPreamble is wrapped by every ReadPreamble error that is about the bytes
// received rather than the transport.
var ErrPreamble = errors.New("bad grant preamble")

// preambleHeader is the length prefix: a 4-byte big-endian token length.
const preambleHeader = 4

// WritePreamble writes token to w as the stream's preamble: its length as a
// 4-byte big-endian integer, then the token.
func WritePreamble(w io.Writer, token []byte) error {
	if len(token) == 0 || len(token) > MaxTokenSize {
		return fmt.Errorf("write grant preamble: token is %d bytes, want 1 to %d", len(token), MaxTokenSize)
	}
	buf := make([]byte, preambleHeader+len(token))
	binary.BigEndian.PutUint32(buf, uint32(len(token)))
	copy(buf[preambleHeader:], token)
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("write grant preamble: %w", err)
	}
	return nil
}

// ReadPreamble reads one preamble from r and returns the token. It reads
// exactly the preamble's bytes and no more, so r can be the raw stream and
// the HTTP request that follows is left unread. A length over max (or over
// MaxTokenSize, whichever is smaller; max <= 0 means MaxTokenSize) is refused
// before anything is allocated.
func ReadPreamble(r io.Reader, max int) ([]byte, error) {
	if max <= 0 || max > MaxTokenSize {
		max = MaxTokenSize
	}
	var hdr [preambleHeader]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("read grant preamble: stream ended inside the length prefix: %w", ErrPreamble)
		}
		return nil, fmt.Errorf("read grant preamble: %w", err)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || uint64(n) > uint64(max) {
		return nil, fmt.Errorf("read grant preamble: length %d, want 1 to %d: %w", n, max, ErrPreamble)
	}
	token := make([]byte, n)
	if _, err := io.ReadFull(r, token); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("read grant preamble: stream ended inside the %d-byte token: %w", n, ErrPreamble)
		}
		return nil, fmt.Errorf("read grant preamble: %w", err)
	}
	return token, nil
}
