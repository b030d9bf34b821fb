// This file is Limen's, added to yamux v0.1.2 (see LIMEN.md); it is under
// the same license as the rest of this directory (MPL-2.0).

package yamux

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// replay runs ops against a recvBuffer and a bytes.Buffer: each op fills
// (op > 0, that many bytes, a counter's values) or reads (op < 0, into a
// buffer of -op bytes, 0 for an empty one). It fails at the first
// difference in what is read or held.
func replay(t *testing.T, ops []int) {
	t.Helper()
	var b recvBuffer
	var want bytes.Buffer
	next := byte(0)
	for i, op := range ops {
		switch {
		case op > 0:
			src := make([]byte, op)
			for k := range src {
				src[k] = next
				next++
			}
			n, err := b.fill(bytes.NewReader(src), op)
			if n != op || err != nil {
				t.Fatalf("op %d: fill %d = %d, %v", i, op, n, err)
			}
			want.Write(src)
		default:
			p, q := make([]byte, -op), make([]byte, -op)
			n, err := b.Read(p)
			m, _ := want.Read(q)
			if n != m || !bytes.Equal(p[:n], q[:m]) {
				t.Fatalf("op %d: read %d: got %d bytes, want %d (or other bytes)", i, -op, n, m)
			}
			if n == 0 && len(p) > 0 && !errors.Is(err, io.EOF) {
				t.Fatalf("op %d: an empty buffer's read: err %v, want io.EOF", i, err)
			}
		}
		if b.Len() != want.Len() {
			t.Fatalf("op %d: Len %d, want %d", i, b.Len(), want.Len())
		}
		if b.Len() == 0 && len(b.chunks) != 0 {
			t.Fatalf("op %d: empty, yet it holds %d chunks", i, len(b.chunks))
		}
		if held := len(b.chunks) - b.head; held > b.Len()/chunkSize+2 {
			t.Fatalf("op %d: %d chunks held for %d bytes", i, held, b.Len())
		}
	}
}

func TestRecvBuffer(t *testing.T) {
	const c = chunkSize
	for name, ops := range map[string][]int{
		"small frames, read at once":         {10, -10, 1, -1, 100, -100},
		"a frame split over reads":           {1000, -1, -10, -989, -5},
		"exactly one chunk":                  {c, -c, c, -1, -(c - 1)},
		"a chunk and a byte":                 {c + 1, -c, -1, -1},
		"frames across chunks, small reads":  {c - 3, 7, c*3 + 5, -4096, -4096, -c, -2 * c, -c, -c},
		"a large frame read in one":          {4 << 20, -(4 << 20), -1},
		"a backlog that never drains":        {c, c, -c / 2, c, -c, c, -c, c, -c, c, -c, c, -c, -c, -c / 2},
		"empty reads (an op of 0)":           {0, 5, 0, -5, 0},
		"the write chunk full, then emptied": {c / 2, c / 2, -c, 1, -1},
	} {
		t.Run(name, func(t *testing.T) { replay(t, ops) })
	}
}

func TestRecvBufferShortFrame(t *testing.T) {
	var b recvBuffer
	n, err := b.fill(bytes.NewReader([]byte("abc")), 5)
	if n != 3 || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("fill of 5 from 3 bytes = %d, %v; want 3, io.ErrUnexpectedEOF", n, err)
	}
	p := make([]byte, 8)
	if n, _ := b.Read(p); string(p[:n]) != "abc" {
		t.Fatalf("read %q after a short frame, want the 3 bytes that came", p[:n])
	}
	if n, err := b.fill(bytes.NewReader(nil), 1); n != 0 || !errors.Is(err, io.ErrUnexpectedEOF) || len(b.chunks) != 0 {
		t.Fatalf("fill from nothing = %d, %v, %d chunks; want 0, io.ErrUnexpectedEOF, none", n, err, len(b.chunks))
	}
}

func FuzzRecvBuffer(f *testing.F) {
	f.Add([]byte{10, 200, 3, 129, 255, 0, 7})
	f.Add([]byte{255, 255, 255, 1, 1, 128, 128, 128})
	f.Fuzz(func(t *testing.T, data []byte) {
		// Each byte is an op: its low 7 bits scaled to up to 2 chunks, its
		// high bit a read.
		ops := make([]int, len(data))
		for i, d := range data {
			size := int(d&0x7f) * (2 * chunkSize) / 127
			if d&0x80 != 0 {
				size = -size
			}
			ops[i] = size
		}
		replay(t, ops)
	})
}
