package recstore

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// IdleTimeout bounds every wait of an upload on either side: for the
// header, a reply, or the next bytes. A peer silent that long is gone, and
// an upload it holds open ends (its bytes kept for a resume).
const IdleTimeout = time.Minute

// copyBuffer is how much of a recording moves per read and write. Each
// write becomes at most one tunnel frame of this size, which is all a
// control message (a lock, a kill) can wait behind on the connection.
const copyBuffer = 128 << 10

// Upload is one recording being received: streamed into its part file and
// hashed as it comes, never held in memory. Begin returns it; feed it with
// ReadFrom, then Commit; always Close it.
type Upload struct {
	s          *Store
	key        string
	cast, part string
	h          Header
	start      int64 // bytes the part file held when the upload began
	need       int64 // room promised to it
	f          *os.File
	sum        hash.Hash
	written    atomic.Int64 // bytes written since the upload began
	committed  bool
	bad        bool // the part file cannot be trusted: removed on Close
}

// Begin answers a worker's Header for a recording of cluster: Stored when
// the store already keeps it with that checksum, Refused when it cannot
// take it (bad names, another checksum already stored, the same recording
// already uploading, no room), or Resume at the bytes it holds of an
// earlier upload cut off. Only with Resume is the *Upload non-nil.
func (s *Store) Begin(cluster string, h Header) (*Upload, Reply) {
	if err := h.validate(); err != nil {
		return nil, refusal(err)
	}
	cast, err := s.paths(cluster, h.ID)
	if err != nil {
		return nil, refusal(err)
	}
	u, stored, err := s.begin(cluster, cast, h)
	switch {
	case err != nil:
		return nil, refusal(err)
	case stored:
		return nil, Reply{Status: Stored, Offset: fileSize(cast), SHA256: h.SHA256}
	}
	if err := u.open(); err != nil {
		u.bad = true
		u.Close()
		return nil, refusal(err)
	}
	return u, Reply{Status: Resume, Offset: u.start}
}

// begin registers the upload and promises it room, or says the recording
// is stored already.
func (s *Store) begin(cluster, cast string, h Header) (*Upload, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := cluster + "/" + h.ID
	if s.uploads[key] != nil {
		return nil, false, fmt.Errorf("recording store: %s is being uploaded already; try again once that upload ended", key)
	}
	switch old, err := readSum(cast); {
	case err == nil && old == h.SHA256:
		// The worker lost our acknowledgement, or could not drop its
		// copy after it: it compares the checksum and stops.
		return nil, true, nil
	case err == nil:
		return nil, false, fmt.Errorf("recording store: %s is already stored with sha256 %s; a stored recording is never replaced", key, old)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, false, err
	}
	if err := os.MkdirAll(filepath.Dir(cast), 0o700); err != nil {
		return nil, false, fmt.Errorf("recording store: %w", err)
	}
	u := &Upload{s: s, key: key, cast: cast, part: cast + extPart, h: h}
	u.start = fileSize(u.part)
	if u.start > h.Size {
		// Not a prefix of this recording: start over.
		if err := s.dropPart(u.part); err != nil {
			return nil, false, err
		}
		u.start = 0
	}
	u.need = h.Size - u.start + sumFileSize
	if err := s.room(u); err != nil {
		return nil, false, err
	}
	if s.uploads == nil {
		s.uploads = map[string]*Upload{}
	}
	s.uploads[key] = u
	s.promised += u.need
	return u, false, nil
}

// room refuses upload u when the store cannot hold the rest of it. A store
// that looks full is measured again first (an operator may have deleted
// recordings). A refused upload's part file is removed, so that it holds no
// room while the recording waits in the worker's spool. s.mu is held.
func (s *Store) room(u *Upload) error {
	fits := func() bool { return s.used+s.promised+u.need <= s.max }
	if fits() {
		return nil
	}
	if err := s.remeasure(); err != nil {
		return err
	}
	if fits() {
		return nil
	}
	if u.start > 0 {
		_ = s.dropPart(u.part)
	}
	return &FullError{Used: s.used + s.promised, Max: s.max, Size: u.h.Size}
}

// dropPart removes a part file no upload is writing; s.mu is held.
func (s *Store) dropPart(part string) error {
	size := fileSize(part)
	if err := os.Remove(part); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("recording store: %w", err)
	}
	s.used -= size
	return nil
}

// open opens the part file and hashes the bytes it already holds, so that
// the checksum Commit compares covers the whole file.
func (u *Upload) open() error {
	f, err := os.OpenFile(u.part, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("recording store: %w", err)
	}
	u.f, u.sum = f, sha256.New()
	if n, err := io.CopyBuffer(u.sum, io.LimitReader(f, u.start), make([]byte, copyBuffer)); err != nil || n != u.start {
		return fmt.Errorf("recording store: read back %s: %d of %d bytes: %v", filepath.Base(u.part), n, u.start, err)
	}
	return nil
}

// ReadFrom writes the rest of the recording, read from r, to the part file:
// exactly the Header's Size less the bytes already held, never more. A
// stream that ends early returns an error wrapping io.ErrUnexpectedEOF, and
// what came is kept for a resume.
func (u *Upload) ReadFrom(r io.Reader) (int64, error) {
	left := u.h.Size - u.start - u.written.Load()
	buf := make([]byte, min(copyBuffer, max(left, 1)))
	var total int64
	for left > 0 {
		n, rerr := r.Read(buf[:min(int64(len(buf)), left)])
		if n > 0 {
			if _, err := u.f.Write(buf[:n]); err != nil {
				u.bad = true
				return total, fmt.Errorf("recording store: %w", err)
			}
			u.sum.Write(buf[:n])
			u.written.Add(int64(n))
			total += int64(n)
			left -= int64(n)
		}
		if rerr != nil && left > 0 {
			if errors.Is(rerr, io.EOF) {
				rerr = io.ErrUnexpectedEOF
			}
			return total, fmt.Errorf("recording upload cut off %d bytes short: %w", left, rerr)
		}
	}
	return total, nil
}

// Commit verifies the complete part file against the Header's size and
// SHA-256, syncs it and makes it the stored recording. A file that does not
// match is removed (on Close) and the worker starts over.
func (u *Upload) Commit() Reply {
	if err := u.commit(); err != nil {
		return refusal(err)
	}
	return Reply{Status: Stored, Offset: u.h.Size, SHA256: u.h.SHA256}
}

func (u *Upload) commit() error {
	if got := u.start + u.written.Load(); got != u.h.Size {
		return fmt.Errorf("recording store: upload ended at %d of %d bytes", got, u.h.Size)
	}
	if got := hex.EncodeToString(u.sum.Sum(nil)); got != u.h.SHA256 {
		u.bad = true
		return fmt.Errorf("recording store: upload is %d bytes with sha256 %s, the worker claims %s; start over", u.h.Size, got, u.h.SHA256)
	}
	if err := u.f.Sync(); err != nil {
		return fmt.Errorf("recording store: sync: %w", err)
	}
	if err := writeFileSync(u.cast+extSum, []byte(u.h.SHA256+"\n")); err != nil {
		return err
	}
	if err := os.Rename(u.part, u.cast); err != nil {
		return fmt.Errorf("recording store: %w", err)
	}
	u.committed = true
	return syncDir(filepath.Dir(u.cast))
}

// Close ends the upload. One that was not committed keeps its part file
// for a resume, synced so that a crash keeps what was written, unless it
// cannot be trusted (a failed write, a wrong checksum).
func (u *Upload) Close() {
	if u.f != nil {
		if !u.committed && !u.bad {
			_ = u.f.Sync()
		}
		_ = u.f.Close()
	}
	s := u.s
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.uploads, u.key)
	s.promised -= u.need
	switch {
	case u.committed:
		s.used += u.written.Load() + sumFileSize
	case u.bad:
		if err := os.Remove(u.part); err == nil || errors.Is(err, fs.ErrNotExist) {
			s.used -= u.start
		}
	default:
		s.used += u.written.Load()
	}
}

// Result says what one upload stream did, for the log.
type Result struct {
	// Header is what the worker announced (zero if it never got that far).
	Header Header
	// Reply is the store's last answer.
	Reply Reply
	// Offset is where the upload resumed; Received the bytes that came.
	Offset, Received int64
}

// Serve runs the store's side of one upload stream from a worker of
// cluster: it reads the Header, asks allow whether this worker may upload
// that recording at all, answers with Begin's offer, streams what follows
// into the store and answers with the outcome. The error says why the
// recording was not stored, if it was not.
func (s *Store) Serve(conn net.Conn, cluster string, allow func(id string) error) (Result, error) {
	var res Result
	_ = conn.SetReadDeadline(time.Now().Add(IdleTimeout))
	h, err := ReadHeader(conn)
	if err != nil {
		return res, err
	}
	res.Header = h
	answer := func(r Reply) error {
		res.Reply = r
		_ = conn.SetWriteDeadline(time.Now().Add(IdleTimeout))
		if err := WriteReply(conn, r); err != nil {
			return fmt.Errorf("answer the worker: %w", err)
		}
		if r.Status == Refused {
			return errors.New(r.Reason)
		}
		return nil
	}
	if err := allow(h.ID); err != nil {
		return res, answer(refusal(err))
	}
	if s.bucket != nil {
		if !validName.MatchString(cluster) {
			return res, answer(refusal(fmt.Errorf("recording store: bad cluster name %q", cluster)))
		}
		return res, s.bucket.serve(conn, cluster, h, answer, &res)
	}
	up, offer := s.Begin(cluster, h)
	if up == nil {
		return res, answer(offer)
	}
	defer up.Close()
	res.Offset = offer.Offset
	if err := answer(offer); err != nil {
		return res, err
	}
	res.Received, err = up.ReadFrom(idleReader{conn})
	if err != nil {
		_ = answer(refusal(err))
		return res, err
	}
	return res, answer(up.Commit())
}

// idleReader fails a read that waits more than IdleTimeout.
type idleReader struct{ c net.Conn }

func (r idleReader) Read(p []byte) (int, error) {
	_ = r.c.SetReadDeadline(time.Now().Add(IdleTimeout))
	return r.c.Read(p)
}

// Send runs the worker's side of one upload stream: it announces h, and
// unless the store answers Stored or Refused at once, sends src's bytes
// from the offset the store asks for and returns the store's final answer.
// src must hold exactly the recording h describes. The caller drops its
// copy only on a Stored reply whose SHA256 is its own.
func Send(conn net.Conn, h Header, src io.ReadSeeker) (Reply, error) {
	_ = conn.SetWriteDeadline(time.Now().Add(IdleTimeout))
	if err := WriteHeader(conn, h); err != nil {
		return Reply{}, fmt.Errorf("send header: %w", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(IdleTimeout))
	offer, err := ReadReply(conn)
	if err != nil {
		return Reply{}, fmt.Errorf("read the proxy's offer: %w", err)
	}
	if offer.Status != Resume {
		return offer, nil
	}
	if offer.Offset > h.Size {
		return Reply{}, fmt.Errorf("the proxy asks for the recording from byte %d of %d", offer.Offset, h.Size)
	}
	if _, err := src.Seek(offer.Offset, io.SeekStart); err != nil {
		return Reply{}, fmt.Errorf("seek the recording: %w", err)
	}
	if n, err := io.CopyBuffer(idleWriter{conn}, io.LimitReader(src, h.Size-offer.Offset), make([]byte, copyBuffer)); err != nil {
		return Reply{}, fmt.Errorf("send the recording: %w", err)
	} else if n != h.Size-offer.Offset {
		return Reply{}, fmt.Errorf("the recording ended %d bytes short of its %d", h.Size-offer.Offset-n, h.Size)
	}
	_ = conn.SetReadDeadline(time.Now().Add(IdleTimeout))
	r, err := ReadReply(conn)
	if err != nil {
		return Reply{}, fmt.Errorf("read the proxy's acknowledgement: %w", err)
	}
	return r, nil
}

// idleWriter fails a write that waits more than IdleTimeout.
type idleWriter struct{ c net.Conn }

func (w idleWriter) Write(p []byte) (int, error) {
	_ = w.c.SetWriteDeadline(time.Now().Add(IdleTimeout))
	return w.c.Write(p)
}
