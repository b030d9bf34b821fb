package console_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/limenhq/limen/gateway/console"
	"github.com/limenhq/limen/gateway/recstore"
)

// TestRecordingCastRangesAndChecks: the recording's answer serves HTTP
// ranges from the store, and a recording changed since it was stored is
// never answered whole: the answer stops short of its Content-Length.
func TestRecordingCastRangesAndChecks(t *testing.T) {
	dir := t.TempDir()
	recs, err := recstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte(`[0.1, "o", "line\r\n"]`+"\n"), 5000)
	store := func(id string) {
		sum := sha256.Sum256(data)
		up, offer := recs.Begin("demo", recstore.Header{ID: id, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])})
		if up == nil {
			t.Fatalf("begin: %+v", offer)
		}
		defer up.Close()
		if _, err := up.ReadFrom(bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		if r := up.Commit(); r.Status != recstore.Stored {
			t.Fatalf("commit: %+v", r)
		}
	}
	store("good")
	store("changed")
	bad := bytes.Clone(data)
	bad[len(bad)-3] = 'X'
	if err := os.WriteFile(filepath.Join(dir, "demo", "changed.cast"), bad, 0o600); err != nil {
		t.Fatal(err)
	}
	e := newEnvWith(t, nil, func(_ *env, c *console.Config) { c.Recordings = recs })
	c := e.client(t)
	signIn(t, c, e, "dana", "dana-password-1")

	get := func(id, rng string) (*http.Response, []byte, error) {
		req, _ := http.NewRequest("GET", e.srv.URL+"/console/api/recordings/"+id, nil)
		if rng != "" {
			req.Header.Set("Range", rng)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, b, err
	}
	if resp, b, err := get("good", ""); err != nil || resp.StatusCode != 200 || !bytes.Equal(b, data) {
		t.Fatalf("whole: %d, %d bytes, %v", resp.StatusCode, len(b), err)
	}
	if resp, b, err := get("good", "bytes=100-199"); err != nil || resp.StatusCode != http.StatusPartialContent || !bytes.Equal(b, data[100:200]) {
		t.Fatalf("range: %d, %q, %v", resp.StatusCode, b, err)
	}
	resp, b, err := get("changed", "")
	if err == nil || len(b) >= len(data) {
		t.Fatalf("a changed recording: status %d, %d of %d bytes, err %v; want the answer cut short", resp.StatusCode, len(b), len(data), err)
	}
}
