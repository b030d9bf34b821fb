package grant

import (
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
	return writeBlob(w, token, "grant preamble")
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
	return readBlob(r, max, "grant preamble")
}
