package recording

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
)

// Tail reads a recording while it is being written to the spool, for the
// console's live view. The file is written a whole event at a time, and a
// recovered one may end in zeros (an older spool preallocated its files),
// so Tail hands out only complete lines before the first zero byte:
// asciicast lines are JSON, which never holds a raw NUL. It costs the
// writer nothing.
type Tail struct {
	s    *Spool
	id   string
	f    *os.File
	off  int64
	buf  []byte
	done bool // the last line was handed out
}

// Follow opens recording id for tailing: the file still being written, or
// the finished one if it was committed already.
func (s *Spool) Follow(id string) (*Tail, error) {
	part, err := s.path(id, extCast+extPart)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(part)
	if errors.Is(err, os.ErrNotExist) {
		cast, _ := s.path(id, extCast)
		f, err = os.Open(cast)
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("spool follow %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("spool follow %s: %w", id, err)
	}
	return &Tail{s: s, id: id, f: f, buf: make([]byte, 64<<10)}, nil
}

// Writing reports whether the recording is still being written (its part
// file is still there): once it is not, what Next returns is all there is.
func (t *Tail) Writing() bool {
	part, _ := t.s.path(t.id, extCast+extPart)
	_, err := os.Stat(part)
	return err == nil
}

// Next returns the complete lines written since the last call, newline
// included; nil when there are none yet.
func (t *Tail) Next() ([]byte, error) {
	var out []byte
	for {
		n, err := t.f.ReadAt(t.buf, t.off)
		chunk := t.buf[:n]
		if z := bytes.IndexByte(chunk, 0); z >= 0 {
			chunk, err = chunk[:z], io.EOF
		}
		end := bytes.LastIndexByte(chunk, '\n')
		if end < 0 && err == nil && len(chunk) == len(t.buf) && len(t.buf) < MaxLine {
			t.buf = make([]byte, 2*len(t.buf)) // a line longer than the buffer
			continue
		}
		if end >= 0 {
			out = append(out, chunk[:end+1]...)
			t.off += int64(end + 1)
		}
		if err != nil || end < 0 {
			if err != nil && !errors.Is(err, io.EOF) {
				return out, fmt.Errorf("spool follow %s: %w", t.id, err)
			}
			return out, nil
		}
	}
}

// Close closes the file.
func (t *Tail) Close() error { return t.f.Close() }
