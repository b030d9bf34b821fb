package recording

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// spoolBlock is how much of a recording a File gathers before writing it:
// large enough that the write and the checksum cost little per byte, small
// enough that a crash loses little and a busy session holds little memory
// (two blocks, see File).
const spoolBlock = 128 << 10

// spoolQuiet bounds how long output waits in memory when a session is
// quiet: a block is written out this long after its first byte at the
// latest.
const spoolQuiet = 200 * time.Millisecond

// spoolReserve is how much disk space a File reserves ahead at a time.
const spoolReserve = 1 << 20

// blocks holds the spool's block buffers between uses, so that an idle
// session holds none.
var blocks = sync.Pool{New: func() any { b := make([]byte, 0, spoolBlock); return &b }}

// Create starts the recording id. Write to the File, then Commit it. A
// spool with less than MinMaxBytes of room refuses it (*SpoolFullError), so
// that a session refused for want of room never starts.
func (s *Spool) Create(id string) (*File, error) {
	p, err := s.path(id, extCast+extPart)
	if err != nil {
		return nil, err
	}
	if err := s.room(MinMaxBytes); err != nil {
		return nil, fmt.Errorf("spool: recording %s refused: %w", id, err)
	}
	if _, err := os.Stat(filepath.Join(s.dir, id+extCast)); err == nil {
		return nil, fmt.Errorf("spool: recording %q already exists", id)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	return &File{s: s, id: id, f: f, sum: sha256.New(), landed: make(chan error, 1)}, nil
}

// File is a recording being written to the spool. Writes are gathered in a
// block; a full block (or one that waited spoolQuiet) is written and added
// to the SHA-256 by a goroutine of its own, while the next one fills. At
// most one block is in flight: the next waits for it to land, which bounds
// the memory and keeps the file and its checksum in order. The package doc
// says what a crash loses.
//
// Write reserves the file's disk space for what it accepts before it
// returns, so a full disk or a file size limit is an error of that Write,
// which takes nothing of p: the event is not relayed, and what was accepted
// before can still be committed. Any other error of a block's write is
// returned by the next call, and every call after it returns it too.
type File struct {
	s  *Spool
	id string
	f  *os.File

	mu     sync.Mutex
	buf    *[]byte     // gathered bytes not yet written; nil when none
	timer  *time.Timer // writes buf out when the session is quiet
	flying bool        // a block is in flight; its result comes on landed
	landed chan error
	sum    hash.Hash // of the bytes in the file, in order; the flight's
	n      int64     // bytes accepted
	// reserved is the file's size once preallocated, past n; -1 when the
	// file system cannot preallocate.
	reserved int64
	err      error // the first failure, returned from then on
	closed   bool
}

var errFileClosed = errors.New("spool: recording already committed or discarded")

// Write appends p to the recording: when it returns nil, the spool holds p,
// and its disk space is reserved. A write that would take the spool past its
// limit is refused whole (*SpoolFullError, makeRoom), like one the disk has
// no room for: the session must end.
func (f *File) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return 0, err
	}
	if err := f.makeRoom(int64(len(p))); err != nil {
		// Nothing of p was taken, so what the File holds is still whole
		// lines and can be committed: the caller ends the session.
		return 0, fmt.Errorf("reserve room in the spool: %w", err)
	}
	n := 0
	for n < len(p) {
		if f.buf == nil {
			f.buf = blocks.Get().(*[]byte)
			f.arm()
		}
		b := *f.buf
		k := copy(b[len(b):cap(b)], p[n:])
		*f.buf = b[:len(b)+k]
		n += k
		f.n += int64(k)
		if len(*f.buf) == cap(*f.buf) {
			if err := f.launch(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// usable returns the error that ended the File, if any, noticing a block
// that landed with one without waiting for a block still in flight.
func (f *File) usable() error {
	if f.closed {
		return errFileClosed
	}
	if f.flying {
		select {
		case err := <-f.landed:
			f.flying = false
			if err != nil && f.err == nil {
				f.err = err
			}
		default:
		}
	}
	return f.err
}

// makeRoom makes room for n more bytes: first within the spool's limit,
// else a *SpoolFullError, then on the disk by preallocating the file
// spoolReserve at a time, never ahead past the spool's limit. The spool
// counts what the file takes on the disk: its reservation, or its bytes
// once a file system that cannot preallocate turned reservation off (the
// file is then written as on any other disk, and a full one fails a later
// write).
func (f *File) makeRoom(n int64) error {
	need := f.n + n
	held := max(f.reserved, f.n) // what the spool counts for this file
	if need <= held {
		return nil
	}
	grow := need - held
	// Room for the checksum file Commit adds too.
	if err := f.s.room(grow + sumFileSize); err != nil {
		return err
	}
	if f.reserved < 0 {
		f.s.used.Add(grow)
		return nil
	}
	size := (need + spoolReserve - 1) / spoolReserve * spoolReserve
	if ahead := max(f.s.max-f.s.used.Load()-grow-sumFileSize, 0); size-need > ahead {
		size = need + ahead
	}
	err := preallocate(f.f, f.reserved, size-f.reserved)
	if err != nil && !errors.Is(err, errors.ErrUnsupported) && size > need {
		// No room for a whole step: the room for these bytes may still
		// be there, and the recording then ends at the disk's true limit.
		size = need
		err = preallocate(f.f, f.reserved, size-f.reserved)
	}
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		f.reserved = -1
		f.s.used.Add(grow)
		return nil
	case err != nil:
		return err
	}
	f.s.used.Add(size - held)
	f.reserved = size
	return nil
}

// arm starts the quiet timer for a block that just got its first bytes.
func (f *File) arm() {
	if f.timer == nil {
		f.timer = time.AfterFunc(spoolQuiet, f.quiet)
		return
	}
	f.timer.Reset(spoolQuiet)
}

// quiet writes out a block that waited spoolQuiet. An error is kept for
// the next call.
func (f *File) quiet() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.buf == nil || f.err != nil {
		return
	}
	_ = f.launch()
}

// launch sends the gathered block on its way once the previous one landed.
func (f *File) launch() error {
	if err := f.land(); err != nil {
		return err
	}
	b := f.buf
	f.buf = nil
	f.flying = true
	go func() {
		err := f.put(*b)
		*b = (*b)[:0]
		blocks.Put(b)
		f.landed <- err
	}()
	return nil
}

// put writes a block to the file and adds what was written to the sum.
// Only the block in flight calls it.
func (f *File) put(b []byte) error {
	n, err := f.f.Write(b)
	f.sum.Write(b[:n])
	if err != nil {
		return fmt.Errorf("spool write %s: %w", f.id, err)
	}
	return nil
}

// land waits for the block in flight, if any, and returns the File's error.
func (f *File) land() error {
	if f.flying {
		f.flying = false
		if err := <-f.landed; err != nil && f.err == nil {
			f.err = err
		}
	}
	return f.err
}

// flush writes out everything gathered and waits until it is in the file.
func (f *File) flush() error {
	if f.buf != nil {
		if err := f.launch(); err != nil {
			return err
		}
	}
	return f.land()
}

// close ends the File's life: the quiet timer is stopped and the file
// closed. Gathered bytes are dropped; flush first to keep them.
func (f *File) close() error {
	f.closed = true
	if f.timer != nil {
		f.timer.Stop()
	}
	_ = f.land()
	if f.buf != nil {
		*f.buf = (*f.buf)[:0]
		blocks.Put(f.buf)
		f.buf = nil
	}
	return f.f.Close()
}

// Commit writes out what is gathered, cuts the reserved space off, syncs
// the recording and makes it pending for upload.
func (f *File) Commit() (Item, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return Item{}, fmt.Errorf("spool commit %s: %w", f.id, errFileClosed)
	}
	err := f.flush()
	if err == nil && f.reserved > f.n {
		if err = f.f.Truncate(f.n); err == nil {
			f.s.used.Add(f.n - f.reserved)
		}
	}
	if err == nil {
		err = f.f.Sync()
	}
	if cerr := f.close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Item{}, fmt.Errorf("spool commit %s: %w", f.id, err)
	}
	sum := hex.EncodeToString(f.sum.Sum(nil))
	if err := f.s.finish(f.id, sum); err != nil {
		return Item{}, err
	}
	return Item{ID: f.id, Size: f.n, SHA256: sum}, nil
}

// Discard drops a recording that never recorded anything (its session
// never started): the file is closed and removed, so nothing is uploaded.
func (f *File) Discard() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return fmt.Errorf("spool discard %s: %w", f.id, errFileClosed)
	}
	cerr := f.close()
	if err := os.Remove(f.f.Name()); err != nil {
		return fmt.Errorf("spool discard %s: %w", f.id, err)
	}
	f.s.used.Add(-max(f.reserved, f.n))
	if cerr != nil {
		return fmt.Errorf("spool discard %s: %w", f.id, cerr)
	}
	return nil
}
