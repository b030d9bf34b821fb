package recstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/s3blob" // registers s3:// on blob.DefaultMux
)

// URLKey is the configuration key of the store's URL, named in every error
// about it.
const URLKey = "recording-store"

// URLOptions say how OpenURL opens a store.
type URLOptions struct {
	// DataDir is the proxy's data directory; an empty URL means the
	// directory store in it (Path(DataDir)).
	DataDir string
	// MaxBytes limits a directory store (0: DefaultMaxBytes). A bucket has
	// no limit here: its quota and lifecycle rules replace it.
	MaxBytes int64
	// ReadOnly opens the store for the CLI beside a running proxy: a
	// directory must exist already, and a bucket is listed, not written.
	ReadOnly bool
}

// OpenURL opens the store raw names:
//
//	file:///var/lib/limen/recordings   a directory (the default: DIR/recordings of the data directory)
//	s3://BUCKET?endpoint=URL&region=R  a bucket of an S3-compatible store; credentials from the
//	                                   usual AWS environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
//	                                   AWS_PROFILE, ~/.aws/credentials, a pod's web identity)
//
// s3:// takes gocloud.dev's parameters (use_path_style=true for most
// S3-compatible servers, disable_https, prefix=…/ to share a bucket). A
// bucket is checked before OpenURL returns (it exists, and this proxy may
// write, read and list it), so that a wrong bucket, key or endpoint stops
// the proxy at start with an error naming URLKey. Errors never carry the
// URL's query, which may hold a profile or endpoint credentials.
func OpenURL(ctx context.Context, raw string, o URLOptions) (*Store, error) {
	if raw == "" {
		if o.DataDir == "" {
			return nil, fmt.Errorf("%s: empty, and no data directory to default to", URLKey)
		}
		raw = "file://" + Path(o.DataDir)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: not a URL; want file:///PATH or s3://BUCKET?endpoint=…&region=…", URLKey)
	}
	switch u.Scheme {
	case "file":
		dir, err := fileURLPath(u)
		if err != nil {
			return nil, err
		}
		if o.ReadOnly {
			return OpenExisting(dir)
		}
		return OpenLimit(dir, o.MaxBytes)
	case "s3":
		return openBucketURL(ctx, u, o)
	}
	return nil, fmt.Errorf("%s %s: unknown scheme %q; want file:///PATH or s3://BUCKET?endpoint=…&region=…", URLKey, redact(u), u.Scheme)
}

// fileURLPath is the directory of a file:// URL: absolute, no host, no
// query (fileblob's options do not apply to the directory store).
func fileURLPath(u *url.URL) (string, error) {
	if u.Host != "" && u.Host != "localhost" || !filepath.IsAbs(u.Path) || u.RawQuery != "" {
		return "", fmt.Errorf("%s %q: want file:///ABSOLUTE/PATH (three slashes, no query)", URLKey, u.String())
	}
	return filepath.Clean(u.Path), nil
}

func openBucketURL(ctx context.Context, u *url.URL, o URLOptions) (*Store, error) {
	name := redact(u)
	if u.Host == "" {
		return nil, fmt.Errorf("%s %s: no bucket; want s3://BUCKET?endpoint=…&region=…", URLKey, name)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("%s %s: a path after the bucket is not a key prefix; use ?prefix=%s/", URLKey, name, strings.Trim(u.Path, "/"))
	}
	b, err := blob.OpenBucket(ctx, u.String())
	if err != nil {
		return nil, fmt.Errorf("%s %s: %s", URLKey, name, strings.ReplaceAll(oneLine(err), u.String(), name))
	}
	bs := &bucketStore{b: b, name: name}
	if o.ReadOnly {
		ctx, cancel := context.WithTimeout(ctx, checkTimeout)
		defer cancel()
		ok, err := b.IsAccessible(ctx)
		if err == nil && !ok {
			err = errors.New("the bucket does not exist")
		}
		if err != nil {
			b.Close()
			return nil, fmt.Errorf("%s %s: %s", URLKey, name, oneLine(err))
		}
	} else if err := bs.check(ctx); err != nil {
		b.Close()
		return nil, fmt.Errorf("%s %s: %w", URLKey, name, err)
	}
	return &Store{bucket: bs}, nil
}

// redact is a URL without its query.
func redact(u *url.URL) string {
	c := *u
	c.RawQuery, c.User = "", nil
	return c.String()
}

// Location names the store for status and logs: its directory, or its URL
// without the query.
func (s *Store) Location() string {
	if s.bucket != nil {
		return s.bucket.name
	}
	return s.dir
}

// Limited says whether the store enforces a size limit (only a directory
// does).
func (s *Store) Limited() bool { return s.bucket == nil }

// Close releases a bucket's client; a directory store holds nothing open.
func (s *Store) Close() error {
	if s.bucket != nil {
		return s.bucket.b.Close()
	}
	return nil
}

// fromBucket is a store over an open bucket (the unit tests' in-memory one).
func fromBucket(b *blob.Bucket, name string) *Store {
	return &Store{bucket: &bucketStore{b: b, name: name}}
}
