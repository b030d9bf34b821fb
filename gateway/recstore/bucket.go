package recstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// bucketStore keeps recordings as objects of a gocloud.dev/blob bucket (S3
// or any S3-compatible store). Each recording is one object,
//
//	CLUSTER/ID/SHA256.cast
//
// so that a listing alone (no request per object) gives every recording's
// cluster, id, checksum, size and time, and a recording stored once is
// recognised by its prefix CLUSTER/ID/ whatever checksum another upload
// claims. An object exists only once its upload completed: a blob writer
// makes nothing visible until it is closed, and an upload whose bytes do
// not match the checksum is aborted before that, so no half or unverified
// recording is ever listed.
//
// An object store cannot append, so an upload cut off restarts from byte 0
// (the worker still holds the whole recording in its spool); and it has no
// size limit here: the bucket's quota and lifecycle rules take the place of
// recording-store-max-bytes.
type bucketStore struct {
	b *blob.Bucket
	// name is the store's URL without its query, for messages.
	name string

	mu sync.Mutex
	// uploads are the uploads in progress, by CLUSTER/ID: one at a time
	// per recording on this proxy.
	uploads map[string]bool
}

// Timeouts of the bucket's requests that have no caller's context.
const (
	bucketOpTimeout = time.Minute
	// stallTimeout aborts an object write that makes no progress.
	stallTimeout = 2 * IdleTimeout
	// checkTimeout bounds the check of a bucket at start.
	checkTimeout = 30 * time.Second
	// partSize is how much of one upload is held in memory at a time: the
	// part the object store is being sent (5 MiB is S3's smallest part).
	partSize = 5 << 20
)

const bucketExt = ".cast"

// objectKey is where recording id of cluster with checksum sum is kept.
func objectKey(cluster, id, sum string) string { return cluster + "/" + id + "/" + sum + bucketExt }

// parseKey reads an object key written by objectKey, refusing any other
// (what else the bucket holds is not a recording of this store).
func parseKey(key string) (cluster, id, sum string, ok bool) {
	rest, ok := strings.CutSuffix(key, bucketExt)
	if !ok {
		return "", "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || !validName.MatchString(parts[0]) || !validName.MatchString(parts[1]) {
		return "", "", "", false
	}
	if b, err := hex.DecodeString(parts[2]); err != nil || len(b) != sha256.Size || hex.EncodeToString(b) != parts[2] {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

// list returns the recordings under prefix ("" for all), oldest first.
func (s *bucketStore) list(ctx context.Context, prefix string) ([]Info, error) {
	it := s.b.List(&blob.ListOptions{Prefix: prefix})
	var out []Info
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("recording store %s: list: %w", s.name, err)
		}
		cluster, id, sum, ok := parseKey(obj.Key)
		if !ok || obj.IsDir {
			continue
		}
		out = append(out, Info{Cluster: cluster, ID: id, Size: obj.Size, SHA256: sum, Time: obj.ModTime, key: obj.Key})
	}
	slices.SortFunc(out, func(a, b Info) int { return a.Time.Compare(b.Time) })
	return out, nil
}

func (s *bucketStore) find(ctx context.Context, id string) (Info, error) {
	all, err := s.list(ctx, "")
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

// open opens a stored recording for reading. The blob reader is seekable:
// each seek becomes a range read of the object from there.
func (s *bucketStore) open(ctx context.Context, info Info) (io.ReadSeekCloser, error) {
	r, err := s.b.NewReader(ctx, info.key, nil)
	if err != nil {
		return nil, fmt.Errorf("recording store %s: read %s: %w", s.name, info.key, err)
	}
	return r, nil
}

func (s *bucketStore) delete(ctx context.Context, info Info) error {
	if err := s.b.Delete(ctx, info.key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return fmt.Errorf("recording store %s: delete %s: %w", s.name, info.key, err)
	}
	return nil
}

// serve is Serve for a bucket: it answers h with Stored, Refused or Resume
// at 0, and after Resume streams the recording into its object as it
// arrives, hashing it, and completes the object only when the bytes match
// h's size and checksum.
func (s *bucketStore) serve(conn net.Conn, cluster string, h Header, answer func(Reply) error, res *Result) error {
	ctx, cancel := context.WithTimeout(context.Background(), bucketOpTimeout)
	defer cancel()
	prefix := cluster + "/" + h.ID + "/"
	had, err := s.list(ctx, prefix)
	switch {
	case err != nil:
		return answer(refusal(err))
	case len(had) > 0 && had[0].SHA256 == h.SHA256:
		return answer(Reply{Status: Stored, Offset: had[0].Size, SHA256: h.SHA256})
	case len(had) > 0:
		return answer(refusal(fmt.Errorf("recording store: %s/%s is already stored with sha256 %s; a stored recording is never replaced", cluster, h.ID, had[0].SHA256)))
	}
	key := cluster + "/" + h.ID
	s.mu.Lock()
	busy := s.uploads[key]
	if !busy {
		if s.uploads == nil {
			s.uploads = map[string]bool{}
		}
		s.uploads[key] = true
	}
	s.mu.Unlock()
	if busy {
		return answer(refusal(fmt.Errorf("recording store: %s is being uploaded already; try again once that upload ended", key)))
	}
	defer func() {
		s.mu.Lock()
		delete(s.uploads, key)
		s.mu.Unlock()
	}()
	if err := answer(Reply{Status: Resume}); err != nil {
		return err
	}
	// The object is written for as long as the bytes keep coming (each
	// read is bounded by IdleTimeout), not within bucketOpTimeout.
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	n, sum, err := s.write(wctx, wcancel, objectKey(cluster, h.ID, h.SHA256), h, idleReader{conn})
	res.Received = n
	if err != nil {
		_ = answer(refusal(err))
		return err
	}
	return answer(Reply{Status: Stored, Offset: h.Size, SHA256: sum})
}

// write streams exactly h.Size bytes of r into the object key, and
// completes it only if they hash to h.SHA256. On any error it aborts the
// object (cancel, the writer's context, then Close): nothing is visible.
func (s *bucketStore) write(ctx context.Context, cancel context.CancelFunc, key string, h Header, r io.Reader) (_ int64, _ string, err error) {
	w, err := s.b.NewWriter(ctx, key, &blob.WriterOptions{
		ContentType: "application/x-asciicast", DisableContentTypeDetection: true,
		BufferSize: partSize, MaxConcurrency: 1,
	})
	if err != nil {
		return 0, "", fmt.Errorf("recording store %s: %w", s.name, err)
	}
	completed := false
	// A store that stops answering without closing the connection would
	// hold this upload (and its recording's slot) for ever: without
	// progress for stallTimeout, the object is aborted.
	stall := time.AfterFunc(stallTimeout, cancel)
	defer func() {
		stall.Stop()
		if !completed {
			cancel()
			_ = w.Close()
		}
	}()
	sum := sha256.New()
	buf := make([]byte, copyBuffer)
	var n int64
	for n < h.Size {
		k, rerr := r.Read(buf[:min(int64(len(buf)), h.Size-n)])
		if k > 0 {
			if _, err := w.Write(buf[:k]); err != nil {
				return n, "", fmt.Errorf("recording store %s: write %s: %s", s.name, key, oneLine(err))
			}
			stall.Reset(stallTimeout)
			sum.Write(buf[:k])
			n += int64(k)
		}
		if rerr != nil && n < h.Size {
			if errors.Is(rerr, io.EOF) {
				rerr = io.ErrUnexpectedEOF
			}
			return n, "", fmt.Errorf("recording upload cut off %d bytes short: %w", h.Size-n, rerr)
		}
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != h.SHA256 {
		return n, "", fmt.Errorf("recording store: upload is %d bytes with sha256 %s, the worker claims %s; start over", h.Size, got, h.SHA256)
	}
	completed = true
	if err := w.Close(); err != nil {
		return n, "", fmt.Errorf("recording store %s: complete %s: %s", s.name, key, oneLine(err))
	}
	return n, h.SHA256, nil
}

// check proves at start that the bucket exists and this proxy may write,
// read and list it: it writes a probe object, reads it back and removes it.
// A wrong bucket, key or endpoint fails here, not at the first upload.
func (s *bucketStore) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	ok, err := s.b.IsAccessible(ctx)
	if err != nil {
		return fmt.Errorf("cannot list the bucket (%s): check the endpoint, the region and the credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY or AWS_PROFILE)", oneLine(err))
	}
	if !ok {
		return errors.New("the bucket does not exist: create it, or correct the bucket name")
	}
	const probe = ".limen-probe"
	want := []byte("limen recording store probe " + time.Now().UTC().Format(time.RFC3339Nano))
	if err := s.b.WriteAll(ctx, probe, want, &blob.WriterOptions{ContentType: "text/plain"}); err != nil {
		return fmt.Errorf("cannot write to the bucket (%s): the credentials need s3:PutObject", oneLine(err))
	}
	got, err := s.b.ReadAll(ctx, probe)
	if err != nil || string(got) != string(want) {
		return fmt.Errorf("cannot read back what was written (%v): the credentials need s3:GetObject", err)
	}
	_ = s.b.Delete(ctx, probe) // retention needs s3:DeleteObject; without it, only retention fails
	return nil
}

// oneLine keeps an SDK error to its first line (they carry request ids and
// wrapped detail over several).
func oneLine(err error) string {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return msg
}
