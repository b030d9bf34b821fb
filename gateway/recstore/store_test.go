package recstore

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

func sumOf(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// countingConn counts the bytes the store's side reads.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// upload sends data as recording id of cluster over a pipe, the worker's
// side (Send) on one end and the store's (Serve) on the other, and returns
// the store's last answer, its error, and the bytes the store read.
func upload(t *testing.T, s *Store, cluster, id string, data []byte, sum string) (Reply, error, int64) {
	t.Helper()
	worker, proxy := net.Pipe()
	var read atomic.Int64
	served := make(chan error, 1)
	go func() {
		defer proxy.Close()
		_, err := s.Serve(countingConn{proxy, &read}, cluster, func(string) error { return nil })
		served <- err
	}()
	r, err := Send(worker, Header{ID: id, Size: int64(len(data)), SHA256: sum}, bytes.NewReader(data))
	worker.Close()
	serr := <-served
	if err != nil {
		return r, err, read.Load()
	}
	if (serr == nil) != (r.Status == Stored) {
		t.Fatalf("the store's side says %v, the worker got %+v", serr, r)
	}
	return r, serr, read.Load()
}

func open(t *testing.T) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s, dir
}

func TestUploadVerifiesAndStores(t *testing.T) {
	s, dir := open(t)
	data := bytes.Repeat([]byte("recording line\n"), 20000)
	sum := sumOf(data)

	if r, _, _ := upload(t, s, "demo", "s1", data, strings.Repeat("0", 64)); r.Status != Refused || !strings.Contains(r.Reason, "start over") {
		t.Fatalf("a wrong checksum: %+v", r)
	}
	if _, err := s.Find("s1"); err == nil {
		t.Fatal("a refused upload is visible")
	}
	if _, err := os.Stat(filepath.Join(dir, "demo", "s1.cast.part")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused upload's part file is kept: %v", err)
	}
	if r, err, _ := upload(t, s, "demo", "s1", data, sum); err != nil || r != (Reply{Status: Stored, Offset: int64(len(data)), SHA256: sum}) {
		t.Fatalf("upload: %+v %v", r, err)
	}
	// The worker could not drop its copy after the acknowledgement and
	// sends it again: the offer says it is stored, and no byte of it comes.
	r, err, read := upload(t, s, "demo", "s1", data, sum)
	if err != nil || r.Status != Stored || r.SHA256 != sum || r.Offset != int64(len(data)) {
		t.Fatalf("a stored recording sent again: %+v %v", r, err)
	}
	if read > int64(MaxHeaderSize) {
		t.Fatalf("the store read %d bytes of a recording it holds, want only the header", read)
	}
	if r, _, _ := upload(t, s, "demo", "s1", []byte("other\n"), sumOf([]byte("other\n"))); r.Status != Refused || !strings.Contains(r.Reason, "never replaced") {
		t.Fatalf("another recording under a stored id: %+v", r)
	}
	rd, info, err := s.Open("s1")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rd)
	rd.Close()
	if err != nil || !bytes.Equal(got, data) || info.Cluster != "demo" || info.SHA256 != sum {
		t.Fatalf("read back: %v, %d bytes, %+v", err, len(got), info)
	}
	if all, err := s.List(); err != nil || len(all) != 1 {
		t.Fatalf("list: %v %+v", err, all)
	}
	if u, err := s.Usage(); err != nil || s.used != u.Used || s.promised != 0 {
		t.Fatalf("the store counts %d bytes (%d promised), the disk holds %+v (%v)", s.used, s.promised, u, err)
	}
}

// cutOff uploads the first n bytes of data and hangs up, as a tunnel that
// drops mid-upload does; the store keeps them.
func cutOff(t *testing.T, s *Store, id string, data []byte, n int) {
	t.Helper()
	worker, proxy := net.Pipe()
	served := make(chan error, 1)
	go func() {
		defer proxy.Close()
		_, err := s.Serve(proxy, "demo", func(string) error { return nil })
		served <- err
	}()
	if err := WriteHeader(worker, Header{ID: id, Size: int64(len(data)), SHA256: sumOf(data)}); err != nil {
		t.Fatal(err)
	}
	if r, err := ReadReply(worker); err != nil || r.Status != Resume {
		t.Fatalf("offer: %+v %v", r, err)
	}
	if _, err := worker.Write(data[:n]); err != nil {
		t.Fatal(err)
	}
	worker.Close()
	if err := <-served; !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a cut-off upload: %v, want it cut short", err)
	}
}

// TestUploadResumes: an upload cut off keeps what came; the next one is
// offered the rest only, and the checksum covers the whole file. A kept
// prefix that is not the recording's fails the checksum and the upload
// after starts over; so does one longer than the recording.
func TestUploadResumes(t *testing.T) {
	s, dir := open(t)
	data := bytes.Repeat([]byte("0123456789abcdef"), 40000)
	cutOff(t, s, "s1", data, 300000)
	part := filepath.Join(dir, "demo", "s1.cast.part")
	if fi, err := os.Stat(part); err != nil || fi.Size() != 300000 {
		t.Fatalf("part file after the cut: %v %v, want 300000 bytes", fi, err)
	}
	r, err, read := upload(t, s, "demo", "s1", data, sumOf(data))
	if err != nil || r.Status != Stored {
		t.Fatalf("resumed upload: %+v %v", r, err)
	}
	if want := int64(len(data)-300000) + int64(MaxHeaderSize); read > want {
		t.Fatalf("the resumed upload read %d bytes, want at most the rest and the header (%d)", read, want)
	}

	// A corrupt prefix: the whole-file checksum refuses it, and the next
	// upload starts at 0.
	cutOff(t, s, "s2", data, 1000)
	if err := os.WriteFile(part[:len(part)-len("s1.cast.part")]+"s2.cast.part", bytes.Repeat([]byte{'!'}, 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	if r, _, _ := upload(t, s, "demo", "s2", data, sumOf(data)); r.Status != Refused || !strings.Contains(r.Reason, "start over") {
		t.Fatalf("resume over a corrupt prefix: %+v", r)
	}
	if r, err, _ := upload(t, s, "demo", "s2", data, sumOf(data)); err != nil || r.Status != Stored {
		t.Fatalf("the upload after a failed checksum: %+v %v", r, err)
	}

	// A part file longer than the recording is not its prefix.
	cutOff(t, s, "s3", bytes.Repeat([]byte("x"), 20), 10)
	up, offer := s.Begin("demo", Header{ID: "s3", Size: 4, SHA256: sumOf([]byte("abc\n"))})
	if up == nil || offer != (Reply{Status: Resume}) {
		t.Fatalf("offer over a longer part file: %+v", offer)
	}
	if _, err := up.ReadFrom(strings.NewReader("abc\nand more")); err != nil {
		t.Fatal(err)
	}
	if r := up.Commit(); r.Status != Stored {
		t.Fatalf("commit: %+v", r)
	}
	up.Close()
	if u, err := s.Usage(); err != nil || s.used != u.Used || s.promised != 0 {
		t.Fatalf("the store counts %d bytes (%d promised), the disk holds %+v (%v)", s.used, s.promised, u, err)
	}
}

// TestUploadOneAtATime: a second upload of a recording being uploaded is
// refused; it is offered once the first ended.
func TestUploadOneAtATime(t *testing.T) {
	s, _ := open(t)
	h := Header{ID: "s1", Size: 10, SHA256: sumOf([]byte("0123456789"))}
	up, offer := s.Begin("demo", h)
	if up == nil {
		t.Fatalf("first: %+v", offer)
	}
	if _, err := up.ReadFrom(strings.NewReader("01234")); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a short stream: %v", err)
	}
	if again, r := s.Begin("demo", h); again != nil || r.Status != Refused || !strings.Contains(r.Reason, "being uploaded already") {
		t.Fatalf("second at once: %+v", r)
	}
	if r := up.Commit(); r.Status != Refused || !strings.Contains(r.Reason, "ended at 5 of 10") {
		t.Fatalf("commit of half a recording: %+v", r)
	}
	up.Close()
	up, offer = s.Begin("demo", h)
	if up == nil || offer.Offset != 5 {
		t.Fatalf("after the first ended: %+v, want a resume at 5", offer)
	}
	up.Close()
}

func TestBeginRefusesBadNames(t *testing.T) {
	s, _ := open(t)
	for _, c := range []struct{ cluster, id string }{{"demo", "../x"}, {"..", "s"}, {"demo", ""}, {"a/b", "s"}, {"demo", "a/b"}, {"", "s"}} {
		if up, r := s.Begin(c.cluster, Header{ID: c.id, Size: 1, SHA256: sumA}); up != nil || r.Status != Refused {
			t.Errorf("cluster %q id %q: %+v", c.cluster, c.id, r)
		}
	}
}

// FuzzServe: whatever a worker sends on an upload stream, the store never
// panics, never writes outside its directory, and whatever it reports
// stored has the checksum it reports.
func FuzzServe(f *testing.F) {
	data := []byte("recording line\n")
	h, _ := AppendHeader(nil, Header{ID: "s1", Size: int64(len(data)), SHA256: sumOf(data)})
	f.Add(append(h, data...))
	f.Add(append(h, data[:3]...))
	f.Add(rawHeader(headerMagic, 4, "../x", 1, make([]byte, 32)))
	f.Add([]byte("LRU1\x02..\x00\x00\x00\x00\x00\x00\x00\x01"))
	f.Fuzz(func(t *testing.T, in []byte) {
		root := t.TempDir()
		s, err := Open(filepath.Join(root, "store"))
		if err != nil {
			t.Fatal(err)
		}
		worker, proxy := net.Pipe()
		go func() {
			_, _ = worker.Write(in)
			_ = worker.Close()
		}()
		go func() { _, _ = io.Copy(io.Discard, worker) }()
		res, err := s.Serve(proxy, "demo", func(string) error { return nil })
		proxy.Close()
		if err == nil {
			r, info, err := s.Open(res.Header.ID)
			if err != nil {
				t.Fatalf("stored %+v but cannot open it: %v", res, err)
			}
			b, _ := io.ReadAll(r)
			r.Close()
			if sumOf(b) != res.Reply.SHA256 || info.SHA256 != res.Reply.SHA256 {
				t.Fatalf("stored %q with checksum %s, the reply says %s", res.Header.ID, sumOf(b), res.Reply.SHA256)
			}
		}
		entries, _ := os.ReadDir(root)
		if len(entries) != 1 || entries[0].Name() != "store" {
			t.Fatalf("Serve wrote outside the store: %v", entries)
		}
	})
}
