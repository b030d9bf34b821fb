package recording

import (
	"bytes"
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

// syncEvery bounds how long written output waits for its data sync
// (fdatasync) after its first byte; syncBytes starts one as soon as that
// much waits. Neither is on the relay's path: the sync runs on a goroutine
// of its own, and only against a power loss, since a written byte survives
// the process (see File).
const (
	syncEvery = 500 * time.Millisecond
	syncBytes = 8 << 20
)

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
	if err := reserveSum(filepath.Join(s.dir, id+extCast+extSum+extPart)); err != nil {
		return nil, fmt.Errorf("spool: recording %s refused: reserve its checksum file: %w", id, err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	return &File{s: s, id: id, f: f, sum: sha256.New()}, nil
}

// reserveSum writes the checksum file of a new recording, full size, before
// its first byte: Commit then overwrites it in place, which needs no new
// room, so a recording whose disk filled up under it still commits.
func reserveSum(name string) error {
	b := bytes.Repeat([]byte{'0'}, sumFileSize)
	b[len(b)-1] = '\n'
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		_ = os.Remove(name)
		return err
	}
	return f.Close()
}

// File is a recording being written to the spool. Each Write is written
// to the file (write(2)) before it returns: once the Writer's event returned,
// a crash of the worker cannot lose it, and the relay passes output on only
// after that. What the kernel holds is synced to the disk (fdatasync) off
// the caller's path, syncEvery after its first byte or as soon as syncBytes
// wait, whichever comes first, and at Commit: a power loss can cost the
// bytes written since the last sync that completed, at most about
// syncEvery's worth of output or syncBytes, plus what was written while that
// sync ran. The package doc says the same for the recording.
//
// A full disk (ENOSPC) or the file size limit (EFBIG) fails the write(2)
// of the Write that meets it, before the event is relayed: the part of it
// written is cut off again, so the Write takes nothing of p and what was
// accepted before can still be committed. (Disk space is not reserved
// ahead with fallocate: writing into reserved, unwritten extents tripled
// the CPU a write costs on ext4, and a synchronous write reports a full
// disk itself.) Any other error (a data sync's, or a cut that failed) is
// returned by that or the next call, and every call after it returns it
// too.
type File struct {
	s  *Spool
	id string
	f  *os.File

	mu     sync.Mutex
	sum    hash.Hash // of the bytes in the file, in order
	n      int64     // bytes accepted: the file's size
	err    error     // the first failure, returned from then on
	closed bool

	// The data sync: unsynced bytes were written since the last sync
	// started; syncing says one is scheduled (timer) or running.
	unsynced  int64
	syncing   bool
	syncTimer *time.Timer
	// fdMu is held by a running sync, so that close never closes the file
	// under it; fdClosed is under it.
	fdMu     sync.Mutex
	fdClosed bool
}

var errFileClosed = errors.New("spool: recording already committed or discarded")

// Write appends p to the recording: when it returns nil, p is in the file
// (the kernel holds it). A write that would take the spool past its limit
// is refused whole (*SpoolFullError, makeRoom), like one the disk has no
// room for: the session must end.
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
	if _, err := f.f.WriteAt(p, f.n); err != nil {
		f.s.used.Add(-int64(len(p)))
		if terr := f.f.Truncate(f.n); terr != nil {
			f.err = fmt.Errorf("spool write %s: %w (and cutting the partial write off: %w)", f.id, err, terr)
			return 0, f.err
		}
		return 0, fmt.Errorf("spool write %s: %w", f.id, err)
	}
	f.sum.Write(p)
	f.n += int64(len(p))
	f.written(int64(len(p)))
	return len(p), nil
}

// usable returns the error that ended the File, if any.
func (f *File) usable() error {
	if f.closed {
		return errFileClosed
	}
	return f.err
}

// makeRoom makes room for n more bytes within the spool's limit (with the
// checksum file Commit adds), else a *SpoolFullError, and counts them.
func (f *File) makeRoom(n int64) error {
	if err := f.s.room(n + sumFileSize); err != nil {
		return err
	}
	f.s.used.Add(n)
	return nil
}

// written schedules the data sync of n bytes just written: syncEvery
// after the first unsynced byte, or at once when syncBytes wait and the
// sync is only scheduled.
func (f *File) written(n int64) {
	f.unsynced += n
	switch {
	case !f.syncing:
		f.syncing = true
		if f.unsynced >= syncBytes {
			go f.sync()
		} else if f.syncTimer == nil {
			f.syncTimer = time.AfterFunc(syncEvery, f.sync)
		} else {
			f.syncTimer.Reset(syncEvery)
		}
	case f.unsynced >= syncBytes && f.syncTimer != nil && f.syncTimer.Stop():
		go f.sync() // scheduled, not running: start it now
	}
}

// sync makes what was written so far durable (fdatasync), without holding
// the File's lock during it, so Write goes on meanwhile. A failure is the
// File's error: the disk may not hold what the relay passed on.
func (f *File) sync() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.unsynced = 0
	f.mu.Unlock()

	f.fdMu.Lock()
	var err error
	if !f.fdClosed {
		err = datasync(f.f)
	}
	f.fdMu.Unlock()

	f.mu.Lock()
	defer f.mu.Unlock()
	f.syncing = false
	if f.closed {
		return
	}
	if err != nil && f.err == nil {
		f.err = fmt.Errorf("spool sync %s: %w", f.id, err)
	}
	if f.unsynced > 0 && f.err == nil {
		f.written(0)
	}
}

// close ends the File's life: the data sync is stopped and the file
// closed, once a sync running on it is done.
func (f *File) close() error {
	f.closed = true
	if f.syncTimer != nil {
		f.syncTimer.Stop()
	}
	f.fdMu.Lock()
	defer f.fdMu.Unlock()
	f.fdClosed = true
	return f.f.Close()
}

// Commit syncs the recording and makes it pending for upload.
func (f *File) Commit() (Item, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return Item{}, fmt.Errorf("spool commit %s: %w", f.id, errFileClosed)
	}
	err := f.err
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
	_ = os.Remove(filepath.Join(f.s.dir, f.id+extCast+extSum+extPart))
	if err := os.Remove(f.f.Name()); err != nil {
		return fmt.Errorf("spool discard %s: %w", f.id, err)
	}
	f.s.used.Add(-f.n)
	if cerr != nil {
		return fmt.Errorf("spool discard %s: %w", f.id, cerr)
	}
	return nil
}
