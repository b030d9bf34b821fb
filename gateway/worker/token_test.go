package worker

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestTokenFileRefusedRereads: the token the API server refused is read
// again at once (the file may have been rotated), but a refusal of a token
// already replaced changes nothing, and the timed re-read stays as it was.
func TestTokenFileRefusedRereads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	tf := &TokenFile{Path: path, Now: func() time.Time { return now }}
	want := func(tok string) {
		t.Helper()
		got, err := tf.Token()
		if err != nil || got != tok {
			t.Fatalf("Token() = %q, %v; want %q", got, err, tok)
		}
	}
	write("old")
	want("old")
	write("new")
	want("old") // cached until the minute is up
	tf.Refused("another")
	want("old") // not the token in use: nothing to drop
	tf.Refused("old")
	want("new")
}
