// Package recstore is the proxy's recording storage: it receives the
// asciicast recordings workers upload over the tunnel, verifies their
// SHA-256 before keeping them, and serves them to the CLI and console. The
// store is named by a URL (OpenURL): a local directory (file://, the
// default) or a bucket of an S3-compatible object store (s3://, through
// gocloud.dev/blob; bucket.go).
//
// Directory layout: DIR/<cluster>/<id>.cast with its checksum in <id>.cast.sha256;
// uploads in progress are <id>.cast.part. A recording becomes visible only
// once complete and verified (streamed to the .part file, checked, synced,
// renamed). An upload cut off keeps its .part file, and the worker resumes
// it where it stopped (upload.go; the protocol is in wire.go).
package recstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/limenhq/limen/gateway/bytesize"
	"github.com/limenhq/limen/gateway/recording"
)

// DirName is the store's directory inside the proxy's data directory.
const DirName = "recordings"

const (
	extCast = ".cast"
	extPart = ".part"
	extSum  = ".sha256"
)

// ErrNotFound is returned for a recording the store does not hold.
var ErrNotFound = errors.New("recording not found")

// validName is what an id or cluster name may look like: it keeps every
// name a single path element.
var validName = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$`)

// Path is the store's directory in the proxy's data directory.
func Path(dataDir string) string { return filepath.Join(dataDir, DirName) }

// DefaultMaxBytes is the store's size limit when none is configured.
const DefaultMaxBytes int64 = 100 << 30

// Store holds verified recordings, in a directory or a bucket (bucket.go).
// It is safe for concurrent use.
type Store struct {
	dir string
	max int64
	// bucket, when set, is where the recordings are, and dir is unused.
	bucket *bucketStore

	mu sync.Mutex // guards what follows
	// used is the bytes of every file in the store, except those written
	// by the uploads in progress since they began; measured again when the
	// store looks full.
	used int64
	// promised is the room the uploads in progress may still take: each
	// one's remaining bytes and checksum file, reserved when it began.
	promised int64
	// uploads are the uploads in progress, by cluster/id: one at a time
	// per recording.
	uploads map[string]*Upload
}

// Info describes a stored recording.
type Info struct {
	Cluster string
	ID      string
	Size    int64
	SHA256  string
	Time    time.Time
	// key is the recording's object in a bucket store.
	key string
}

// Open opens (creating it if needed) the store in dir, limited to
// DefaultMaxBytes.
func Open(dir string) (*Store, error) { return OpenLimit(dir, DefaultMaxBytes) }

// OpenLimit opens (creating it if needed) the store in dir, which holds at
// most maxBytes (0: DefaultMaxBytes): an upload that would take it past the
// limit is refused (FullError), and the recording stays in the worker's
// spool until there is room.
func OpenLimit(dir string, maxBytes int64) (*Store, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("recording store: %w", err)
	}
	s := &Store{dir: dir, max: maxBytes}
	if err := s.remeasure(); err != nil {
		return nil, err
	}
	return s, nil
}

// OpenExisting opens a store that must already exist (for read-only use by
// the CLI on the proxy host).
func OpenExisting(dir string) (*Store, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("recording store %s: %w; pass the proxy's --data-dir", dir, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("recording store %s: not a directory", dir)
	}
	return &Store{dir: dir}, nil
}

func (s *Store) paths(cluster, id string) (string, error) {
	if !validName.MatchString(cluster) {
		return "", fmt.Errorf("recording store: bad cluster name %q", cluster)
	}
	if !validName.MatchString(id) {
		return "", fmt.Errorf("recording store: bad recording id %q", id)
	}
	return filepath.Join(s.dir, cluster, id+extCast), nil
}

// FullError refuses an upload that would take the store past its limit.
type FullError struct {
	Used, Max int64
	// Size is the whole recording's, when the worker said it.
	Size int64
}

func (e *FullError) Error() string {
	what := "the recording"
	if e.Size > 0 {
		what = "the recording of " + bytesize.Approx(e.Size)
	}
	return fmt.Sprintf("the proxy's recording store is full: %s in use of its %s limit (recording-store-max-bytes), so %s does not fit; "+
		"it stays in the worker's spool and is uploaded once an operator deletes old recordings or raises recording-store-max-bytes",
		bytesize.Approx(e.Used), bytesize.Format(e.Max), what)
}

// remeasure sets used from the disk; s.mu is held.
func (s *Store) remeasure() error {
	used, _, err := s.measure()
	if err != nil {
		return err
	}
	for _, u := range s.uploads {
		used -= u.written.Load()
	}
	s.used = used
	return nil
}

// sumFileSize is the size of a recording's checksum file.
const sumFileSize = 2*sha256.Size + 1

func fileSize(name string) int64 {
	fi, err := os.Stat(name)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// measure adds up the size of every file in the store and counts the
// stored recordings.
func (s *Store) measure() (used int64, recordings int, _ error) {
	err := filepath.WalkDir(s.dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		used += fi.Size()
		if strings.HasSuffix(d.Name(), extCast) {
			recordings++
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("recording store: measure %s: %w", s.dir, err)
	}
	return used, recordings, nil
}

// Usage is how much of its limit the store uses.
type Usage struct {
	Used, Max  int64
	Recordings int
}

// Usage measures the store. A bucket has no limit here (Max is 0): its
// quota and lifecycle rules take the place of recording-store-max-bytes.
func (s *Store) Usage() (Usage, error) {
	if s.bucket != nil {
		all, err := s.List()
		var used int64
		for _, info := range all {
			used += info.Size
		}
		return Usage{Used: used, Recordings: len(all)}, err
	}
	used, n, err := s.measure()
	if err != nil {
		return Usage{}, err
	}
	return Usage{Used: used, Max: s.max, Recordings: n}, nil
}

func writeFileSync(name string, b []byte) error {
	tmp := name + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("recording store: %w", err)
	}
	_, werr := f.Write(b)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return fmt.Errorf("recording store: %w", err)
	}
	if err := os.Rename(tmp, name); err != nil {
		return fmt.Errorf("recording store: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("recording store: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("recording store: sync %s: %w", dir, err)
	}
	return nil
}

// readSum reads the checksum of a stored recording; a recording without
// its cast file is not stored.
func readSum(cast string) (string, error) {
	if _, err := os.Stat(cast); err != nil {
		return "", err
	}
	sum, err := recording.ReadSumFile(cast + extSum)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("recording store: %w", err)
	}
	return sum, err
}

// List returns every stored recording, oldest first.
func (s *Store) List() ([]Info, error) {
	if s.bucket != nil {
		ctx, cancel := context.WithTimeout(context.Background(), bucketOpTimeout)
		defer cancel()
		return s.bucket.list(ctx, "")
	}
	clusters, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("recording store: %w", err)
	}
	var out []Info
	for _, c := range clusters {
		if !c.IsDir() || !validName.MatchString(c.Name()) {
			continue
		}
		files, err := os.ReadDir(filepath.Join(s.dir, c.Name()))
		if err != nil {
			return nil, fmt.Errorf("recording store: %w", err)
		}
		for _, f := range files {
			id, ok := strings.CutSuffix(f.Name(), extCast)
			if !ok || !validName.MatchString(id) {
				continue
			}
			if info, err := s.stat(c.Name(), id); err == nil {
				out = append(out, info)
			}
		}
	}
	slices.SortFunc(out, func(a, b Info) int { return a.Time.Compare(b.Time) })
	return out, nil
}

func (s *Store) stat(cluster, id string) (Info, error) {
	cast, err := s.paths(cluster, id)
	if err != nil {
		return Info{}, err
	}
	st, err := os.Stat(cast)
	if err != nil {
		return Info{}, err
	}
	sum, err := readSum(cast)
	if err != nil {
		return Info{}, err
	}
	return Info{Cluster: cluster, ID: id, Size: st.Size(), SHA256: sum, Time: st.ModTime()}, nil
}

// Find returns the stored recording id, in whichever cluster holds it.
func (s *Store) Find(id string) (Info, error) {
	if s.bucket != nil {
		ctx, cancel := context.WithTimeout(context.Background(), bucketOpTimeout)
		defer cancel()
		return s.bucket.find(ctx, id)
	}
	all, err := s.List()
	if err != nil {
		return Info{}, err
	}
	for _, info := range all {
		if info.ID == id {
			return info, nil
		}
	}
	return Info{}, fmt.Errorf("%w: %s", ErrNotFound, id)
}

// Open opens the recording id for reading and checks it against its stored
// SHA-256 as it is read: the Read that would complete a changed recording
// fails instead, so a changed recording is never read whole. The reader
// seeks (a range read of a bucket's object); bytes read after a seek to
// anywhere but the start are not checked, since only the whole recording
// has a checksum.
func (s *Store) Open(id string) (io.ReadSeekCloser, Info, error) {
	info, err := s.Find(id)
	if err != nil {
		return nil, info, err
	}
	var r io.ReadSeekCloser
	if s.bucket != nil {
		r, err = s.bucket.open(context.Background(), info)
	} else {
		cast, _ := s.paths(info.Cluster, id)
		r, err = os.Open(cast)
	}
	if err != nil {
		return nil, info, fmt.Errorf("recording store: %w", err)
	}
	return &verifying{r: r, size: info.Size, h: sha256.New(), want: info.SHA256, hashing: true}, info, nil
}

// verifying hashes what is read from the start and withholds the last
// bytes of a recording that changed since it was stored.
type verifying struct {
	r    io.ReadSeekCloser
	size int64
	h    hash.Hash
	want string
	pos  int64
	// hashing: h holds exactly the bytes [0, pos); verified: and they were
	// all of them, and matched.
	hashing, verified bool
}

func (v *verifying) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.pos += int64(n)
	if !v.hashing || v.verified {
		return n, err
	}
	v.h.Write(p[:n])
	if v.pos < v.size && err == nil {
		return n, nil
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return n, err
	}
	if v.pos != v.size {
		return 0, fmt.Errorf("recording store: recording is %d bytes or more, %d when it was stored: it changed", v.pos, v.size)
	}
	if got := hex.EncodeToString(v.h.Sum(nil)); got != v.want {
		return 0, fmt.Errorf("recording store: recording changed since it was stored (sha256 %s, stored %s)", got, v.want)
	}
	v.verified = true
	return n, err
}

func (v *verifying) Seek(offset int64, whence int) (int64, error) {
	pos, err := v.r.Seek(offset, whence)
	if err != nil {
		return pos, err
	}
	v.pos = pos
	v.hashing, v.verified = pos == 0, false
	v.h.Reset()
	return pos, nil
}

func (v *verifying) Close() error { return v.r.Close() }
