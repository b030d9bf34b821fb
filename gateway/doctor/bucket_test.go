package doctor

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/test/s3server"
)

// TestBucketRecordingStore: a recording store in a bucket of a real S3
// server is judged by listing it; a wrong key fails naming the store's key.
func TestBucketRecordingStore(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs versitygw")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	srv, err := s3server.Start(ctx, t.TempDir(), os.Stderr, "recordings")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, kv := range s3server.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	wantResult(t, recordingStoreOf(ctx, ProxyOptions{DataDir: t.TempDir(), RecordingStore: srv.URL("recordings")}), OK, "s3://recordings", "0 recordings", "quota")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
	wantResult(t, BucketRecordingStore(ctx, srv.URL("recordings")), Fail, "recording-store s3://recordings")
}
