package recstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limenhq/limen/test/s3server"
)

// startS3 starts the real S3 server (versitygw, built once and cached)
// with bucket "recordings", and the AWS credentials of its root account in
// the environment.
func startS3(t *testing.T) *s3server.Server {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs versitygw")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	srv, err := s3server.Start(ctx, t.TempDir(), os.Stderr, "recordings")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	for _, kv := range s3server.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	return srv
}

// TestS3Store: the store on a real S3 server takes, verifies and serves
// recordings as the in-memory bucket does, and what it keeps is one object
// per recording in the server's own files.
func TestS3Store(t *testing.T) {
	srv := startS3(t)
	ctx := context.Background()
	s, err := OpenURL(ctx, srv.URL("recordings"), URLOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	testBucketUpload(t, s, s.bucket.b)
	objs, err := srv.Objects("recordings")
	if err != nil || len(objs) != 1 || !strings.HasPrefix(objs[0], "demo/s1/") {
		t.Fatalf("the server's files: %v %v", objs, err)
	}
	ro, err := OpenURL(ctx, srv.URL("recordings"), URLOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	all, err := ro.List()
	if err != nil || len(all) != 1 {
		t.Fatalf("read-only list: %+v %v", all, err)
	}
	// Another proxy on the same bucket (its console, limen play) serves
	// the recording the first one stored, byte for byte.
	other, err := OpenURL(ctx, srv.URL("recordings"), URLOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	read := func(st *Store) []byte {
		t.Helper()
		rc, _, err := st.Open(all[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if mine, theirs := read(s), read(other); len(mine) == 0 || !bytes.Equal(mine, theirs) {
		t.Fatalf("the other proxy reads %d bytes of the recording, the one that stored it %d", len(theirs), len(mine))
	}
}

// TestS3StoreRefusesAtStart: a wrong bucket, a wrong secret key or a server
// that is not there stop OpenURL (and so the proxy) with an error naming
// the recording-store key and what to check.
func TestS3StoreRefusesAtStart(t *testing.T) {
	srv := startS3(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cases := map[string]struct {
		url, secret string
		want        []string
	}{
		"no such bucket": {url: srv.URL("nope"), want: []string{"recording-store s3://nope", "does not exist"}},
		"wrong secret":   {url: srv.URL("recordings"), secret: "wrong", want: []string{"recording-store s3://recordings", "credentials", "AWS_SECRET_ACCESS_KEY"}},
		"unknown param":  {url: srv.URL("recordings") + "&colour=blue", want: []string{"recording-store s3://recordings", "colour"}},
		"path":           {url: "s3://recordings/sub?endpoint=" + srv.Endpoint, want: []string{"recording-store", "prefix=sub/"}},
		"relative file":  {url: "file://rel/dir", want: []string{"recording-store", "ABSOLUTE"}},
		"scheme":         {url: "gs://b", want: []string{"recording-store", "unknown scheme"}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if c.secret != "" {
				t.Setenv("AWS_SECRET_ACCESS_KEY", c.secret)
			}
			s, err := OpenURL(ctx, c.url, URLOptions{})
			if err == nil {
				s.Close()
				t.Fatal("opened")
			}
			t.Logf("%s", err)
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "127.0.0.1") {
				t.Errorf("error %q carries the URL's query", err)
			}
		})
	}
	srv.Stop()
	if _, err := OpenURL(ctx, srv.URL("recordings"), URLOptions{}); err == nil || !strings.Contains(err.Error(), "endpoint") {
		t.Fatalf("a server that is down: %v", err)
	}
}

// pattern is a recording of any size that exists nowhere in memory: byte i
// is a function of i.
type pattern struct{ size int64 }

func (p pattern) ReadAt(b []byte, off int64) (int, error) {
	if off >= p.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(b)), p.size-off))
	for i := range n {
		b[i] = "limen recording pattern\n"[(off+int64(i))%24]
	}
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

// TestS3UploadStreams: a 128 MiB recording goes into the real S3 server
// without the proxy holding it: the heap grows by far less than its size
// while it is uploaded (the S3 client's two parts of 5 MiB, and the copy
// buffers).
func TestS3UploadStreams(t *testing.T) {
	srv := startS3(t)
	s, err := OpenURL(context.Background(), srv.URL("recordings"), URLOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const size = 128 << 20
	src := io.NewSectionReader(pattern{size}, 0, size)
	h := sha256.New()
	if _, err := io.Copy(h, src); err != nil {
		t.Fatal(err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	// Collect often, so that the heap in use is near what is live.
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
		}
	}()
	worker, proxy := net.Pipe()
	served := make(chan error, 1)
	go func() {
		defer proxy.Close()
		_, err := s.Serve(proxy, "demo", func(string) error { return nil })
		served <- err
	}()
	r, err := Send(worker, Header{ID: "big", Size: size, SHA256: sum}, src)
	worker.Close()
	close(stop)
	<-sampled
	if err != nil || r.Status != Stored || <-served != nil {
		t.Fatalf("upload: %+v %v", r, err)
	}
	grew := int64(peak.Load()) - int64(base.HeapInuse)
	t.Logf("heap in use grew by %.1f MiB during a %d MiB upload", float64(grew)/(1<<20), size>>20)
	if grew > 64<<20 { // half the recording; buffering it whole would be 128
		t.Fatalf("the heap grew by %d MiB during a %d MiB upload: the upload is buffered", grew>>20, size>>20)
	}
	if info, err := s.Find("big"); err != nil || info.Size != size || info.SHA256 != sum {
		t.Fatalf("stored: %+v %v", info, err)
	}
}
