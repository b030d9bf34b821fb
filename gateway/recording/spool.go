package recording

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/limenhq/limen/gateway/bytesize"
)

// Spool file names: a recording in progress is <id>.cast.part; a finished one
// is <id>.cast with its hex SHA-256 in <id>.cast.sha256.
const (
	extCast = ".cast"
	extPart = ".part"
	extSum  = ".sha256"
)

// ErrNotFound is returned for an id that is not in the spool.
var ErrNotFound = errors.New("recording not in spool")

var validID = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$`)

// Spool is a directory of recordings on the worker's disk. Each recording is
// finished atomically with its SHA-256, stays until its upload is
// acknowledged, and survives a restart: recordings cut short by a crash are
// finished when the spool is opened.
//
// A spool holds at most its limit (OpenSpoolLimit): with less than
// MinMaxBytes of room it refuses new recordings (Create), and a write that
// would pass the limit is refused whole (*SpoolFullError), which ends the
// session being recorded — a recording is never cut silently.
type Spool struct {
	dir string
	max int64
	// used is the bytes of every file in the spool, recordings in progress
	// included; measured again whenever the spool looks full.
	used atomic.Int64
	// measuring serializes measurements, so that a full spool under a flood
	// of new sessions walks its directory once at a time.
	measuring sync.Mutex
}

// DefaultSpoolMaxBytes is the spool's limit when none is configured: ten
// recordings at the default cap.
const DefaultSpoolMaxBytes int64 = 10 << 30

// ErrSpoolFull means the spool has no room for a recording, or for more of
// one. Errors of this kind are *SpoolFullError.
var ErrSpoolFull = errors.New("recording spool full")

// SpoolFullError refuses a recording, or a write to one, for want of room
// in the spool.
type SpoolFullError struct {
	Used, Max int64
}

func (e *SpoolFullError) Error() string {
	return fmt.Sprintf("the worker's recording spool is full: %s in use of its %s limit (recording-spool-max-bytes)",
		bytesize.Approx(e.Used), bytesize.Format(e.Max))
}

// Is makes errors.Is(err, ErrSpoolFull) hold.
func (e *SpoolFullError) Is(target error) bool { return target == ErrSpoolFull }

// Item is a finished recording waiting for upload.
type Item struct {
	ID     string
	Size   int64
	SHA256 string
}

// OpenSpool opens (creating it if needed) the spool in dir, limited to
// DefaultSpoolMaxBytes, and finishes the recordings a previous process left
// in progress.
func OpenSpool(dir string) (*Spool, error) { return OpenSpoolLimit(dir, DefaultSpoolMaxBytes) }

// OpenSpoolLimit opens (creating it if needed) the spool in dir, holding at
// most maxBytes (0: DefaultSpoolMaxBytes), and finishes the recordings a
// previous process left in progress.
func OpenSpoolLimit(dir string, maxBytes int64) (*Spool, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultSpoolMaxBytes
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	s := &Spool{dir: dir, max: maxBytes}
	parts, err := filepath.Glob(filepath.Join(dir, "*"+extCast+extPart))
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	for _, p := range parts {
		if err := s.recover(p); err != nil {
			return nil, err
		}
	}
	if _, _, err := s.measure(); err != nil {
		return nil, err
	}
	return s, nil
}

// measure adds up the size of every file in the spool, remembers it, and
// counts the finished recordings. A recording in progress counts with what
// it wrote so far.
func (s *Spool) measure() (used int64, finished int, _ error) {
	s.measuring.Lock()
	defer s.measuring.Unlock()
	used, finished, err := measureDir(s.dir)
	if err == nil {
		s.used.Store(used)
	}
	return used, finished, err
}

func measureDir(dir string) (used int64, finished int, _ error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, fmt.Errorf("spool: measure: %w", err)
	}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue // removed meanwhile, or not a file
		}
		used += fi.Size()
		if strings.HasSuffix(e.Name(), extCast) {
			finished++
		}
	}
	return used, finished, nil
}

// room returns a *SpoolFullError unless the spool has room for n more
// bytes, measuring it again first when it looks full: uploads and an
// operator free room.
func (s *Spool) room(n int64) error {
	if s.used.Load()+n <= s.max {
		return nil
	}
	used, _, err := s.measure()
	if err != nil {
		return err
	}
	if used+n <= s.max {
		return nil
	}
	return &SpoolFullError{Used: used, Max: s.max}
}

// sumFileSize is the size of a recording's checksum file.
const sumFileSize = 2*sha256.Size + 1

// SpoolUsage is how much of its limit the spool uses.
type SpoolUsage struct {
	Used, Max int64
	// Pending counts the finished recordings waiting for upload.
	Pending int
}

// Usage measures the spool.
func (s *Spool) Usage() (SpoolUsage, error) {
	used, n, err := s.measure()
	if err != nil {
		return SpoolUsage{}, err
	}
	return SpoolUsage{Used: used, Max: s.max, Pending: n}, nil
}

// SpoolUsageOf measures the spool in dir against maxBytes without opening
// it: it only reads, so it is safe beside the worker that owns the spool
// (OpenSpool would finish that worker's recordings in progress).
func SpoolUsageOf(dir string, maxBytes int64) (SpoolUsage, error) {
	used, n, err := measureDir(dir)
	if err != nil {
		return SpoolUsage{}, err
	}
	return SpoolUsage{Used: used, Max: maxBytes, Pending: n}, nil
}

// recover finishes a recording cut short by a crash, without holding it in
// memory however large it grew: it is cut back to its last complete line (a
// partial JSON line would make the file invalid), a marker event says it was
// recovered, and it is committed with its SHA-256 computed as it is read.
func (s *Spool) recover(part string) error {
	f, err := os.OpenFile(part, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("spool recover: %w", err)
	}
	sum, err := recoverFile(f)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("spool recover %s: %w", filepath.Base(part), err)
	}
	return s.finish(strings.TrimSuffix(filepath.Base(part), extCast+extPart), sum)
}

// partFile is what recoverFile needs of a recording in progress (an
// *os.File).
type partFile interface {
	io.ReaderAt
	io.WriterAt
	Stat() (os.FileInfo, error)
	Truncate(size int64) error
	Sync() error
}

// recoverBlock is how much of a recording recovery reads at a time.
const recoverBlock = 64 << 10

// recoveredMarker ends a recording finished by recovery.
var recoveredMarker = appendEvent(nil, 0, "m",
	[]byte("Limen recovered this recording after the worker stopped: the session may have gone on past this point"))

// recoverFile cuts f back to its last complete line, appends the recovery
// marker (when a header survived) and returns the hex SHA-256 of the result.
// It reads f in blocks of recoverBlock. (The marker may take a recording
// already cut at its cap that one line past it.)
func recoverFile(f partFile) (string, error) {
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	end, err := lastLineEnd(f, fi.Size())
	if err != nil {
		return "", err
	}
	if err := f.Truncate(end); err != nil {
		return "", err
	}
	if end > 0 {
		if _, err := f.WriteAt(recoveredMarker, end); err != nil {
			return "", err
		}
		end += int64(len(recoveredMarker))
	}
	if err := f.Sync(); err != nil {
		return "", err
	}
	h := sha256.New()
	if _, err := io.CopyBuffer(h, io.NewSectionReader(f, 0, end), make([]byte, recoverBlock)); err != nil {
		return "", fmt.Errorf("read back: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// lastLineEnd returns the offset just past the last newline among the first
// size bytes of r, or 0 if there is none, reading backwards block by block.
func lastLineEnd(r io.ReaderAt, size int64) (int64, error) {
	buf := make([]byte, recoverBlock)
	for off := size; off > 0; {
		n := int(min(off, int64(len(buf))))
		off -= int64(n)
		if m, err := r.ReadAt(buf[:n], off); m < n {
			return 0, fmt.Errorf("read at %d: %w", off, cmp.Or(err, io.ErrUnexpectedEOF))
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			return off + int64(i) + 1, nil
		}
	}
	return 0, nil
}

func (s *Spool) path(id, ext string) (string, error) {
	if !validID.MatchString(id) {
		return "", fmt.Errorf("spool: invalid recording id %q", id)
	}
	return filepath.Join(s.dir, id+ext), nil
}

// finish renames <id>.cast.part to <id>.cast after writing its checksum.
func (s *Spool) finish(id, sum string) error {
	cast := filepath.Join(s.dir, id+extCast)
	if err := writeFileSync(cast+extSum, []byte(sum+"\n")); err != nil {
		return fmt.Errorf("spool commit %s: %w", id, err)
	}
	if err := os.Rename(cast+extPart, cast); err != nil {
		return fmt.Errorf("spool commit %s: %w", id, err)
	}
	s.used.Add(sumFileSize)
	return syncDir(s.dir)
}

// writeFileSync writes a file atomically: temporary file, fsync, rename.
// A temporary file of len(b) bytes already there (reserveSum's) is
// overwritten in place, so that no new room is needed.
func writeFileSync(name string, b []byte) error {
	tmp := name + extPart
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if fi, err := os.Stat(tmp); err == nil && fi.Size() == int64(len(b)) {
		flags = os.O_WRONLY
	}
	f, err := os.OpenFile(tmp, flags, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Pending lists the finished recordings not yet acknowledged, oldest id first.
func (s *Spool) Pending() ([]Item, error) {
	casts, err := filepath.Glob(filepath.Join(s.dir, "*"+extCast))
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	sort.Strings(casts)
	items := make([]Item, 0, len(casts))
	for _, c := range casts {
		id := strings.TrimSuffix(filepath.Base(c), extCast)
		if !validID.MatchString(id) {
			continue // not ours
		}
		it, err := s.item(id, c)
		if err != nil {
			return nil, err
		}
		items = append(items, it)
	}
	return items, nil
}

func (s *Spool) item(id, cast string) (Item, error) {
	fi, err := os.Stat(cast)
	if err != nil {
		return Item{}, fmt.Errorf("spool: %w", err)
	}
	sum, err := ReadSumFile(cast + extSum)
	if err != nil {
		return Item{}, fmt.Errorf("spool: checksum of %s: %w", id, err)
	}
	return Item{ID: id, Size: fi.Size(), SHA256: sum}, nil
}

// ReadSumFile reads a checksum file: one hex SHA-256 and a newline.
// Anything longer is not one of ours and is not read whole. The spool and
// the proxy's recording store keep their checksums this way.
func ReadSumFile(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 2*sha256.Size+2))
	if err != nil {
		return "", err
	}
	sum := strings.TrimSpace(string(b))
	if _, err := hex.DecodeString(sum); err != nil || len(sum) != 2*sha256.Size {
		return "", fmt.Errorf("%s does not hold a hex SHA-256", filepath.Base(name))
	}
	return sum, nil
}

// Open opens a finished recording for upload; it seeks, so that an upload
// can resume where the store's copy ends.
func (s *Spool) Open(id string) (io.ReadSeekCloser, error) {
	p, err := s.path(id, extCast)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("spool open %s: %w", id, ErrNotFound)
	}
	return f, err
}

// Ack deletes a recording whose upload the store acknowledged with sum. A
// checksum that differs from the spooled one is an error and keeps the file.
func (s *Spool) Ack(id, sum string) error {
	p, err := s.path(id, extCast)
	if err != nil {
		return err
	}
	it, err := s.item(id, p)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("spool ack %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return err
	}
	if !strings.EqualFold(it.SHA256, sum) {
		return fmt.Errorf("spool ack %s: acknowledged sha256 %s, spooled %s", id, sum, it.SHA256)
	}
	if err := os.Remove(p); err != nil {
		return fmt.Errorf("spool ack %s: %w", id, err)
	}
	s.used.Add(-it.Size)
	if err := os.Remove(p + extSum); err != nil {
		return fmt.Errorf("spool ack %s: %w", id, err)
	}
	s.used.Add(-sumFileSize)
	return syncDir(s.dir)
}
