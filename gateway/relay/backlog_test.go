package relay

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
)

// TestBacklogKeepsOrder writes chunks of random sizes while a reader takes
// them in other sizes: every byte comes out once, in order, across the
// moves between memory and the spill file, and the Backlog never holds
// more than its limit.
func TestBacklogKeepsOrder(t *testing.T) {
	dir := t.TempDir()
	const memory, limit = 1 << 10, 16 << 10
	b := NewBacklog(dir, memory, limit)
	defer b.Close()
	want := make([]byte, 4<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	go func() {
		r := rand.New(rand.NewPCG(3, 4))
		for p := want; len(p) > 0; {
			n := min(len(p), 1+r.IntN(3000))
			if _, err := b.Write(p[:n]); err != nil {
				t.Errorf("write: %v", err)
				return
			}
			p = p[n:]
		}
		b.CloseWrite(nil)
	}()
	var got bytes.Buffer
	r := rand.New(rand.NewPCG(5, 6))
	for {
		buf := make([]byte, 1+r.IntN(5000))
		n, err := b.Read(buf)
		got.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read after %d bytes: %v", got.Len(), err)
		}
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("read %d bytes, not the %d written in order", got.Len(), len(want))
	}
	if p := b.Peak(); p > limit {
		t.Fatalf("held %d bytes at once, limit %d", p, limit)
	}
	if b.file == nil {
		t.Fatal("never spilled to the file; the test does not cover the file")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("the spill file has a name in %s: %v", dir, ents)
	}
}

// TestBacklogAbsorbsWithoutReader: with nobody reading, the writer keeps
// going up to the limit, far beyond the memory part.
func TestBacklogAbsorbsWithoutReader(t *testing.T) {
	b := NewBacklog(t.TempDir(), 4<<10, 1<<20)
	defer b.Close()
	chunk := bytes.Repeat([]byte("x"), 8<<10)
	for written := 0; written+len(chunk) <= 1<<20; written += len(chunk) {
		if _, err := b.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if p := b.Peak(); p != 1<<20 {
		t.Fatalf("held %d bytes, want %d", p, 1<<20)
	}
}

func TestBacklogEndsWithTheSourceError(t *testing.T) {
	b := NewBacklog(t.TempDir(), 16, 1<<20)
	defer b.Close()
	reset := errors.New("connection reset by peer")
	src := io.MultiReader(bytes.NewReader(bytes.Repeat([]byte("y"), 1000)), errReader{reset})
	if err := Fill(b, src); err != nil {
		t.Fatalf("Fill: %v", err)
	}
	got, err := io.ReadAll(b)
	if len(got) != 1000 || !errors.Is(err, reset) {
		t.Fatalf("read %d bytes then %v; want 1000 bytes then the source's error", len(got), err)
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// TestBacklogCloseWakesWriter: a writer waiting for room returns once the
// Backlog is closed, so the goroutine filling it can end.
func TestBacklogCloseWakesWriter(t *testing.T) {
	b := NewBacklog(t.TempDir(), 16, 64)
	if _, err := b.Write(make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var werr error
	wg.Go(func() { _, werr = b.Write(make([]byte, 1)) })
	_ = b.Close()
	wg.Wait()
	if !errors.Is(werr, ErrBacklogClosed) {
		t.Fatalf("blocked write returned %v, want ErrBacklogClosed", werr)
	}
	if _, err := b.Read(make([]byte, 1)); !errors.Is(err, ErrBacklogClosed) {
		t.Fatalf("read after Close: %v", err)
	}
}

// TestBacklogTailSparesTheFile: a backlog that stays under twice its
// memory part never writes the file, even while it is spilled, and its
// bytes still come out in order; past that, the file is written in
// tail-sized writes, not one per Write.
func TestBacklogTailSparesTheFile(t *testing.T) {
	const memory = 4 << 10
	b := NewBacklog(t.TempDir(), memory, 1<<20)
	defer b.Close()
	var want []byte
	write := func(n int) {
		p := bytes.Repeat([]byte{byte(len(want))}, n)
		want = append(want, p...)
		if _, err := b.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	for range 7 { // 7 KiB: memory full, the tail holds the rest
		write(1 << 10)
	}
	if b.file != nil {
		t.Fatal("the file was created for a backlog under twice the memory size")
	}
	for range 16 { // 16 KiB more: the tail reaches the file in 4 KiB writes
		write(1 << 10)
	}
	if b.file == nil {
		t.Fatal("a backlog of 23 KiB with 4 KiB of memory did not spill")
	}
	if b.fw%memory != 0 {
		t.Errorf("the file holds %d bytes: not whole tails of %d", b.fw, memory)
	}
	b.CloseWrite(nil)
	got, err := io.ReadAll(b)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes (%v), not the %d written in order", len(got), err, len(want))
	}
}
