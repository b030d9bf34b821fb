package recording

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSpoolLifecycle(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Create("sess-1")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer // what the Writer wrote, as the spool should hold it
	w := NewWriter(io.MultiWriter(f, &b), meta())
	if err := w.Stdout([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if items, _ := s.Pending(); len(items) != 0 {
		t.Fatalf("a recording in progress is pending: %+v", items)
	}
	item, err := f.Commit()
	if err != nil {
		t.Fatal(err)
	}
	if want := sha(b.Bytes()); item.SHA256 != want || item.Size != int64(b.Len()) {
		t.Errorf("committed %+v; the Writer wrote %d bytes with sum %s", item, b.Len(), want)
	}
	if _, err := s.Create("sess-1"); err == nil {
		t.Error("a second recording with the same id was created")
	}

	// A restarted worker finds the recording pending.
	s2, err := OpenSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	items, err := s2.Pending()
	if err != nil || len(items) != 1 || items[0] != item {
		t.Fatalf("Pending after restart = %+v, %v; want [%+v]", items, err, item)
	}
	rc, err := s2.Open("sess-1")
	if err != nil {
		t.Fatal(err)
	}
	opened, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(opened, b.Bytes()) {
		t.Error("opened bytes are not what the Writer wrote")
	}
	if err := s2.Ack("sess-1", strings.Repeat("0", 64)); err == nil {
		t.Error("ack with a wrong sum deleted the recording")
	}
	if err := s2.Ack("sess-1", item.SHA256); err != nil {
		t.Fatal(err)
	}
	if items, _ := s2.Pending(); len(items) != 0 {
		t.Errorf("acknowledged recording still pending: %+v", items)
	}
	if _, err := s2.Open("sess-1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open after ack: %v, want ErrNotFound", err)
	}
	if err := s2.Ack("sess-1", item.SHA256); !errors.Is(err, ErrNotFound) {
		t.Errorf("second ack: %v, want ErrNotFound", err)
	}
}

// TestSpoolRecoversCrashedRecording: a recording the worker was writing when
// it died is kept, cut to its last complete line, closed with a marker
// saying it was recovered, and becomes pending.
func TestSpoolRecoversCrashedRecording(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Create("crash")
	if err != nil {
		t.Fatal(err)
	}
	complete := validHeader + `[0.1, "o", "kept"]` + "\n"
	if _, err := io.WriteString(f, complete+`[0.2, "o", "cut`); err != nil {
		t.Fatal(err)
	}
	// The gathered block reached the file (what a crash loses before that
	// is TestSpoolCrashLosesAtMostTheGatheredBlocks), and then no Commit:
	// the process dies here.
	if err := f.flushNow(); err != nil {
		t.Fatal(err)
	}
	s2, err := OpenSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	items, err := s2.Pending()
	if err != nil || len(items) != 1 {
		t.Fatalf("Pending = %+v, %v", items, err)
	}
	want := complete + `[0.000, "m", "Limen recovered this recording after the worker stopped: the session may have gone on past this point"]` + "\n"
	sum := sha256.Sum256([]byte(want))
	if items[0].SHA256 != hex.EncodeToString(sum[:]) || items[0].Size != int64(len(want)) {
		t.Errorf("recovered %+v, want the %d complete bytes and the marker", items[0], len(complete))
	}
	b, _ := os.ReadFile(filepath.Join(dir, "crash.cast"))
	if string(b) != want {
		t.Errorf("recovered recording:\n%s\nwant:\n%s", b, want)
	}
	if err := readAll(strings.NewReader(string(b))); err != nil {
		t.Errorf("recovered recording does not parse: %v", err)
	}
}

// TestSpoolRecoversHeaderlessRecording: a recording cut before its header
// line was complete is committed empty, with no marker (which would make it
// a recording without a header).
func TestSpoolRecoversHeaderlessRecording(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Create("early")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(f, `{"version":3,"term":{"co`); err != nil {
		t.Fatal(err)
	}
	if err := f.flushNow(); err != nil { // in the file, then the process dies
		t.Fatal(err)
	}
	s2, err := OpenSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	items, err := s2.Pending()
	empty := sha256.Sum256(nil)
	if err != nil || len(items) != 1 || items[0].Size != 0 || items[0].SHA256 != hex.EncodeToString(empty[:]) {
		t.Fatalf("Pending = %+v, %v; want one empty recording", items, err)
	}
}

func TestSpoolRejectsBadIDs(t *testing.T) {
	s, err := OpenSpool(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"", "../x", "a/b", ".hidden", "x\x00", strings.Repeat("a", 200)} {
		if _, err := s.Create(id); err == nil {
			t.Errorf("Create(%q) accepted", id)
		}
		if _, err := s.Open(id); err == nil {
			t.Errorf("Open(%q) accepted", id)
		}
	}
}

// TestSpoolDiscard: a recording of a session that never started leaves
// nothing behind, not even after a restart's recovery.
func TestSpoolDiscard(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Create("never-started")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Discard(); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Fatalf("discarded recording left %v", left)
	}
	s2, err := OpenSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	if items, err := s2.Pending(); err != nil || len(items) != 0 {
		t.Fatalf("after a restart: pending %+v, %v", items, err)
	}
	// The id is free again: nothing of it remains.
	if f, err = s2.Create("never-started"); err != nil {
		t.Fatal(err)
	}
	_ = f.Discard()
}

// TestSpoolRefusesForeignChecksum: a checksum file that is not one hex
// SHA-256 (here 8 MiB of something else) is an error naming the recording,
// and is not read whole.
func TestSpoolRefusesForeignChecksum(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "odd.cast"), []byte(validHeader), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "odd.cast.sha256"), bytes.Repeat([]byte("f"), 8<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pending(); err == nil || !strings.Contains(err.Error(), "odd") {
		t.Errorf("Pending with a foreign checksum file: %v, want an error naming the recording", err)
	}
	if err := s.Ack("odd", strings.Repeat("f", 64)); err == nil {
		t.Error("Ack accepted a recording whose checksum file is not a checksum")
	}
}
