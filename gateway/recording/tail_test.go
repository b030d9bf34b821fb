package recording

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// A live view tails a recording being written: it sees only whole lines,
// never the zeros the file is preallocated with past its content, and, once
// the recording is committed, all of it.
func TestTailFollowsWholeLines(t *testing.T) {
	s, err := OpenSpool(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Create("sess-1")
	if err != nil {
		t.Fatal(err)
	}
	tail, err := s.Follow("sess-1")
	if err != nil {
		t.Fatal(err)
	}
	defer tail.Close()
	if got, err := tail.Next(); err != nil || len(got) != 0 {
		t.Fatalf("nothing written yet: %q, %v", got, err)
	}
	// More than 128 KiB of lines, written at once.
	line := `[0.1, "o", "` + strings.Repeat("x", 100) + `"]` + "\n"
	var want bytes.Buffer
	for want.Len() <= 128<<10 {
		want.WriteString(line)
	}
	if _, err := f.Write(want.Bytes()); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for deadline := time.Now().Add(10 * time.Second); len(got) == 0 && time.Now().Before(deadline); {
		b, err := tail.Next()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, b...)
		time.Sleep(time.Millisecond)
	}
	// Usually the first block only, cut inside a line; all of it if the
	// quiet timer wrote the rest meanwhile. Either way, whole lines.
	if len(got) == 0 || !bytes.HasPrefix(want.Bytes(), got) || got[len(got)-1] != '\n' {
		t.Fatalf("mid-recording the tail read %d bytes, want whole lines of the %d written", len(got), want.Len())
	}
	if bytes.IndexByte(got, 0) >= 0 {
		t.Fatal("the tail handed out preallocated zeros")
	}
	if !tail.Writing() {
		t.Fatal("Writing is false before the commit")
	}
	if _, err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	if tail.Writing() {
		t.Fatal("Writing is true after the commit")
	}
	rest, err := tail.Next()
	if err != nil {
		t.Fatal(err)
	}
	if got = append(got, rest...); !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("after the commit the tail read %d bytes, want all %d", len(got), want.Len())
	}
	if _, err := s.Follow("no-such"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Follow of a missing recording: %v, want ErrNotFound", err)
	}
}
