package recstore

import (
	"context"
	"os"
	"strings"
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
	if all, err := ro.List(); err != nil || len(all) != 1 {
		t.Fatalf("read-only list: %+v %v", all, err)
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
