package relay

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
)

// Backlog is a first-in, first-out byte queue between a connection that
// must be read as fast as it sends and a consumer that may be slower. It
// keeps up to a memory limit in memory and the rest in an unlinked
// temporary file, up to a total limit, beyond which Write waits for the
// consumer.
//
// The worker drains the API server into a Backlog because the Kubernetes
// hops (kubelet, API server) close a finished stream at once: output still
// queued in their sockets at that moment is discarded if any byte (a
// heartbeat) reaches them before it is sent. Bytes waiting in Limen's
// Backlog are never at risk.
//
// A source that is a little faster than its consumer, which is every bulk
// stream through Limen, keeps a Backlog past its memory part for the whole
// stream. So once spilled, new bytes gather in a second memory buffer, the
// tail, and reach the file only when the tail is full, in one write of up
// to the memory size. The consumer reads memory, then the file, then takes
// the tail as its memory once the file is drained: a stream whose backlog
// stays under twice the memory size never touches the file, and one that
// does costs the file one large write per memory size instead of one per
// read of the source.
type Backlog struct {
	dir         string
	memory, max int64

	writeMu sync.Mutex // one Write at a time: a tail flush runs unlocked

	mu      sync.Mutex
	changed *sync.Cond // data, space, end or close
	mem     []byte     // the oldest unread bytes, in memory: mem[r:]
	r       int
	file    *os.File // spill file, nil until needed
	spilled bool     // new bytes go to the tail (and the file), not mem
	fr, fw  int64    // file read and write offsets
	tail    []byte   // the newest bytes while spilled, in memory
	writing bool     // the tail is being written to the file (fw is about to move)
	ended   error    // set by CloseWrite: Read returns it once drained
	closed  bool
	peak    int64
}

// ErrBacklogClosed is returned by Write after Close.
var ErrBacklogClosed = errors.New("backlog closed")

// ErrBacklog wraps a failure of the spill file.
var ErrBacklog = errors.New("stream backlog")

// NewBacklog returns a Backlog that keeps up to memory bytes in memory
// (twice that once it spills: the oldest and the newest bytes), spills to a
// file in dir ("" for the system's temporary directory), and holds at most
// max bytes in all.
func NewBacklog(dir string, memory, max int64) *Backlog {
	if memory <= 0 {
		memory = 1
	}
	if max < memory {
		max = memory
	}
	b := &Backlog{dir: dir, memory: memory, max: max}
	b.changed = sync.NewCond(&b.mu)
	return b
}

// unread is the number of bytes waiting; b.mu is held.
func (b *Backlog) unread() int64 { return int64(len(b.mem)-b.r+len(b.tail)) + b.fw - b.fr }

// Write appends p, waiting while the Backlog holds max bytes. It fails
// after Close, or when the spill file cannot be written.
func (b *Backlog) Write(p []byte) (int, error) {
	b.writeMu.Lock()
	defer b.writeMu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	for !b.closed && b.unread() > 0 && b.unread()+int64(len(p)) > b.max {
		b.changed.Wait()
	}
	if b.closed {
		return 0, ErrBacklogClosed
	}
	switch {
	case !b.spilled && int64(len(b.mem)-b.r+len(p)) <= b.memory:
		if b.r > 0 && len(b.mem)+len(p) > cap(b.mem) {
			b.mem = b.mem[:copy(b.mem, b.mem[b.r:])]
			b.r = 0
		}
		b.mem = append(b.mem, p...)
	case int64(len(b.tail)+len(p)) <= b.memory:
		b.spilled = true
		b.tail = append(b.tail, p...)
	default:
		b.spilled = true
		if err := b.flush(p); err != nil {
			return 0, err
		}
	}
	b.peak = max(b.peak, b.unread())
	b.changed.Broadcast()
	return len(p), nil
}

// flush writes the tail to the file and makes p the new tail, or writes p
// to the file too when it is larger than a tail. The file is written
// without b.mu; b.mu is held on entry and on return.
func (b *Backlog) flush(p []byte) error {
	if b.file == nil {
		f, err := os.CreateTemp(b.dir, "limen-backlog-*")
		if err != nil {
			return fmt.Errorf("%w: %w", ErrBacklog, err)
		}
		_ = os.Remove(f.Name()) // the open file is all that is needed
		b.file = f
	}
	direct := int64(len(p)) > b.memory
	b.writing = true
	f, off, tail := b.file, b.fw, b.tail
	b.mu.Unlock()
	_, err := f.WriteAt(tail, off)
	if err == nil && direct {
		_, err = f.WriteAt(p, off+int64(len(tail)))
	}
	b.mu.Lock()
	b.writing = false
	b.changed.Broadcast() // a reader may wait for the flush to end
	if b.closed {
		_ = b.closeFile()
		return ErrBacklogClosed
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBacklog, err)
	}
	b.fw += int64(len(tail))
	b.tail = b.tail[:0]
	if direct {
		b.fw += int64(len(p))
	} else {
		b.tail = append(b.tail, p...)
	}
	return nil
}

// CloseWrite ends the input: Read returns err (io.EOF for a clean end)
// once every byte before it was read.
func (b *Backlog) CloseWrite(err error) {
	if err == nil {
		err = io.EOF
	}
	b.mu.Lock()
	if b.ended == nil {
		b.ended = err
	}
	b.changed.Broadcast()
	b.mu.Unlock()
}

// Read returns the oldest bytes, waiting for some, or the error given to
// CloseWrite once all were read.
func (b *Backlog) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		for b.unread() == 0 && b.ended == nil && !b.closed {
			b.changed.Wait()
		}
		switch {
		case b.closed:
			return 0, ErrBacklogClosed
		case b.r < len(b.mem):
			n := copy(p, b.mem[b.r:])
			b.r += n
			if b.r == len(b.mem) {
				b.mem, b.r = b.mem[:0], 0
			}
			b.changed.Broadcast()
			return n, nil
		case b.fr < b.fw:
			return b.readFile(p)
		case b.writing:
			// The next bytes are the tail on its way to the file.
			b.changed.Wait()
		case b.spilled:
			// Memory and file are drained: the tail is the oldest now,
			// and it becomes memory, where new bytes go again.
			b.mem, b.r, b.tail = b.tail, 0, b.mem[:0]
			b.spilled = false
			if b.fw > 0 {
				b.fr, b.fw = 0, 0
				_ = b.file.Truncate(0)
			}
		default:
			return 0, b.ended
		}
	}
}

// readFile reads from the spill file without b.mu; b.mu is held on entry
// and on return.
func (b *Backlog) readFile(p []byte) (int, error) {
	n := int(min(int64(len(p)), b.fw-b.fr))
	f, off := b.file, b.fr
	b.mu.Unlock()
	n, err := f.ReadAt(p[:n], off)
	b.mu.Lock()
	if b.closed {
		return 0, ErrBacklogClosed
	}
	b.fr += int64(n)
	b.changed.Broadcast()
	if err != nil && n == 0 {
		return 0, fmt.Errorf("%w: %w", ErrBacklog, err)
	}
	return n, nil
}

// Ended reports whether CloseWrite was called.
func (b *Backlog) Ended() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ended != nil
}

// Peak is the most bytes the Backlog held at once.
func (b *Backlog) Peak() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.peak
}

// Close drops what is held, wakes a waiting Write or Read and removes the
// spill file.
func (b *Backlog) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	b.mem, b.r, b.tail = nil, 0, nil
	b.changed.Broadcast()
	if !b.writing {
		return b.closeFile() // else the writer closes it when its write returns
	}
	return nil
}

// closeFile closes the spill file, if any; b.mu is held.
func (b *Backlog) closeFile() error {
	if b.file == nil {
		return nil
	}
	err := b.file.Close()
	b.file = nil
	return err
}

// Fill reads src into b until src ends, then ends b's input with src's
// error (nil for io.EOF). It returns when src ends or b refuses a write
// (closed, or its file failed), so that the caller can stop src.
func Fill(b *Backlog, src io.Reader) error {
	buf := make([]byte, bufferSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := b.Write(buf[:n]); werr != nil {
				b.CloseWrite(werr)
				return werr
			}
		}
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			b.CloseWrite(err)
			return nil
		}
	}
}
