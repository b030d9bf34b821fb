// This file is Limen's, added to yamux v0.1.2 (see LIMEN.md); it is under
// the same license as the rest of this directory (MPL-2.0).

package yamux

import (
	"io"
	"sync"
)

// chunkSize is the size of one piece of a stream's receive buffer: a TLS
// record's worth, so that a small frame does not hold much.
const chunkSize = 16 << 10

type chunk = [chunkSize]byte

var chunkPool = sync.Pool{New: func() any { return new(chunk) }}

// recvBuffer is what a stream received and its reader has not read yet, in
// pooled chunks. A frame fills the last chunk and takes another from the pool
// when it is full; a read gives back each chunk it empties, and the whole
// buffer once it is empty.
//
// It replaces the bytes.Buffer of upstream yamux, which a response larger
// than its first frame made grow by reallocating (and zeroing) a buffer twice
// the size and copying what was unread into it: on Limen's proxy, about 1 MB
// allocated per LIST of 500 ConfigMaps, and a tenth of its CPU. An idle
// stream kept that buffer too; an empty recvBuffer holds no chunk.
type recvBuffer struct {
	chunks []*chunk // chunks[head:] hold the data
	head   int
	off    int // read offset in chunks[head]
	end    int // write offset in the last chunk
	n      int // bytes unread
}

// Len returns the number of bytes unread.
func (b *recvBuffer) Len() int { return b.n }

// fill appends the next n bytes of r, and returns how many it appended: n,
// or fewer with the error that stopped it (io.ErrUnexpectedEOF for an early
// end).
func (b *recvBuffer) fill(r io.Reader, n int) (int, error) {
	done := 0
	for done < n {
		if len(b.chunks) == b.head || b.end == chunkSize {
			b.chunks = append(b.chunks, chunkPool.Get().(*chunk))
			b.end = 0
		}
		last := b.chunks[len(b.chunks)-1]
		want := chunkSize - b.end // yamux's own min takes uint32s
		if n-done < want {
			want = n - done
		}
		m, err := io.ReadFull(r, last[b.end:b.end+want])
		b.end += m
		b.n += m
		done += m
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			b.releaseIfEmpty()
			return done, err
		}
	}
	return done, nil
}

// Read moves up to len(p) unread bytes into p.
func (b *recvBuffer) Read(p []byte) (int, error) {
	if b.n == 0 {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	read := 0
	for read < len(p) && b.n > 0 {
		lim := chunkSize
		if b.head == len(b.chunks)-1 {
			lim = b.end
		}
		m := copy(p[read:], b.chunks[b.head][b.off:lim])
		read += m
		b.off += m
		b.n -= m
		if b.off == chunkSize {
			b.dropHead()
		}
	}
	b.releaseIfEmpty()
	return read, nil
}

// dropHead gives the emptied first chunk back to the pool, and moves the
// chunks down once half the slice is spent. (When it was the last chunk,
// nothing is unread and Read's releaseIfEmpty resets the buffer.)
func (b *recvBuffer) dropHead() {
	chunkPool.Put(b.chunks[b.head])
	b.chunks[b.head] = nil
	b.head++
	b.off = 0
	if b.head > len(b.chunks)/2 {
		k := copy(b.chunks, b.chunks[b.head:])
		clear(b.chunks[k:])
		b.chunks, b.head = b.chunks[:k], 0
	}
}

// releaseIfEmpty gives every chunk back once nothing is unread.
func (b *recvBuffer) releaseIfEmpty() {
	if b.n != 0 {
		return
	}
	for i := b.head; i < len(b.chunks); i++ {
		chunkPool.Put(b.chunks[i])
	}
	clear(b.chunks)
	b.chunks, b.head, b.off, b.end = b.chunks[:0], 0, 0, 0
}
