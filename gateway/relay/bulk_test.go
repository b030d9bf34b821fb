package relay

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// script is a body that answers each Read with its next piece, and fails
// the test if a Read comes while check says it must not.
type script struct {
	pieces [][]byte
	check  func() error
}

func (s *script) Read(p []byte) (int, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	if len(s.pieces) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.pieces[0])
	s.pieces = s.pieces[1:]
	return n, nil
}

// TestBulkFlushes: reads that fill the buffer are written unflushed; a
// short read is flushed before the next read, which may block (a body the
// API server holds open); a nil flush never flushes.
func TestBulkFlushes(t *testing.T) {
	full, short := bytes.Repeat([]byte("x"), 8), []byte("first\n")
	var out bytes.Buffer
	flushed, flushes := 0, 0
	body := &script{pieces: [][]byte{full, full, short, full, short}}
	body.check = func() error {
		// After a short piece (it ends in a newline), all must be flushed.
		if b := out.Bytes(); len(b) > 0 && b[len(b)-1] == '\n' && flushed != len(b) {
			return errors.New("a short read's bytes were not flushed before the next read")
		}
		return nil
	}
	flush := func() error { flushed, flushes = out.Len(), flushes+1; return nil }
	if err := Bulk(&out, body, make([]byte, 8), flush); err != nil {
		t.Fatal(err)
	}
	if want := 2*8 + 6 + 8 + 6; out.Len() != want || flushes != 2 {
		t.Fatalf("wrote %d bytes with %d flushes, want %d bytes and 2 flushes (one per short read)", out.Len(), flushes, want)
	}
	out.Reset()
	body = &script{pieces: [][]byte{full, short}, check: func() error { return nil }}
	if err := Bulk(&out, body, make([]byte, 8), nil); err != nil || out.Len() != 14 {
		t.Fatalf("nil flush: %d bytes, %v", out.Len(), err)
	}
}
