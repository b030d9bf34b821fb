package recstore

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func upload(t *testing.T, s *Store, cluster, id string, data []byte, sum string) Ack {
	t.Helper()
	var ack Ack
	for off := 0; ; off += MaxChunk {
		end := min(off+MaxChunk, len(data))
		c := Chunk{ID: id, Offset: int64(off), Data: data[off:end]}
		if end == len(data) {
			c.Final, c.Size, c.SHA256 = true, int64(len(data)), sum
		}
		if ack = s.Put(cluster, c); ack.Error != "" || c.Final {
			return ack
		}
	}
}

func TestPutVerifiesAndStores(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("recording line\n"), 20000) // several chunks
	sum := sha256.Sum256(data)
	hexSum := hex.EncodeToString(sum[:])

	if ack := upload(t, s, "demo", "s1", data, strings.Repeat("0", 64)); ack.Error == "" {
		t.Fatal("a wrong checksum was accepted")
	}
	if _, err := s.Find("s1"); err == nil {
		t.Fatal("a refused upload is visible")
	}
	if ack := upload(t, s, "demo", "s1", data, hexSum); ack.Error != "" || ack.SHA256 != hexSum {
		t.Fatalf("upload: %+v", ack)
	}
	// The worker lost the ack and sends the last chunk again.
	if ack := s.Put("demo", Chunk{ID: "s1", Offset: int64(len(data)), Final: true, Size: int64(len(data)), SHA256: hexSum}); ack.Error != "" || ack.SHA256 != hexSum {
		t.Fatalf("repeated final chunk: %+v", ack)
	}
	// The worker could not drop its copy after the final Ack (its spool
	// failed) and starts over: the first chunk's Ack says what is stored,
	// so that the worker can stop there.
	if ack := s.Put("demo", Chunk{ID: "s1", Data: data[:MaxChunk]}); ack.Error != "" || ack.SHA256 != hexSum || ack.Next != int64(len(data)) {
		t.Fatalf("first chunk of a stored recording: %+v, want its checksum and size", ack)
	}
	if ack := upload(t, s, "demo", "s1", []byte("other"), "x"); ack.Error == "" {
		t.Fatal("a stored recording was overwritten")
	}
	r, info, err := s.Open("s1")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, data) || info.Cluster != "demo" || info.SHA256 != hexSum {
		t.Fatalf("read back: %v, %d bytes, %+v", err, len(got), info)
	}
	if all, err := s.List(); err != nil || len(all) != 1 {
		t.Fatalf("list: %v %+v", err, all)
	}
}

func TestPutRefusesBadNamesAndGaps(t *testing.T) {
	s, _ := Open(t.TempDir())
	for _, c := range []struct{ cluster, id string }{{"demo", "../x"}, {"..", "s"}, {"demo", ""}, {"a/b", "s"}} {
		if ack := s.Put(c.cluster, Chunk{ID: c.id, Final: true}); ack.Error == "" {
			t.Errorf("cluster %q id %q accepted", c.cluster, c.id)
		}
	}
	if ack := s.Put("demo", Chunk{ID: "s", Offset: 10, Data: []byte("x")}); ack.Error == "" || ack.Next != 0 {
		t.Errorf("a chunk past the stored bytes: %+v", ack)
	}
	if ack := s.Put("demo", Chunk{ID: "s", Data: make([]byte, MaxChunk+1)}); ack.Error == "" {
		t.Error("an oversized chunk was accepted")
	}
}

// FuzzPut: whatever chunks a worker sends (ids, offsets, sizes and
// checksums it chose), the store never panics, never writes outside its
// directory, and whatever it reports stored has the checksum it reports.
func FuzzPut(f *testing.F) {
	data := []byte("recording line\n")
	sum := sha256.Sum256(data)
	f.Add("s1", int64(0), data, true, int64(len(data)), hex.EncodeToString(sum[:]))
	f.Add("../x", int64(0), data, true, int64(1), "00")
	f.Add("s2", int64(7), data, false, int64(0), "")
	f.Add("s3", int64(-1), []byte{}, true, int64(-5), strings.Repeat("f", 64))
	f.Fuzz(func(t *testing.T, id string, off int64, chunk []byte, final bool, size int64, sha string) {
		root := t.TempDir()
		s, err := Open(filepath.Join(root, "store"))
		if err != nil {
			t.Fatal(err)
		}
		ack := s.Put("demo", Chunk{ID: id, Offset: off, Data: chunk, Final: final, Size: size, SHA256: sha})
		if ack.Error == "" && final {
			r, info, err := s.Open(id)
			if err != nil {
				t.Fatalf("acked %+v but cannot open %q: %v", ack, id, err)
			}
			b, _ := io.ReadAll(r)
			r.Close()
			got := sha256.Sum256(b)
			if hex.EncodeToString(got[:]) != ack.SHA256 || info.SHA256 != ack.SHA256 {
				t.Fatalf("stored %q with checksum %s, ack says %s", id, hex.EncodeToString(got[:]), ack.SHA256)
			}
		}
		entries, _ := os.ReadDir(root)
		if len(entries) != 1 || entries[0].Name() != "store" {
			t.Fatalf("Put(%q) wrote outside the store: %v", id, entries)
		}
	})
}
