package tunnel

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
)

// writeLog is a net.Conn that keeps each Write it is given.
type writeLog struct {
	net.Conn
	writes [][]byte
}

func (w *writeLog) Write(p []byte) (int, error) {
	w.writes = append(w.writes, bytes.Clone(p))
	return len(p), nil
}

func header(typ byte, length uint32) []byte {
	h := make([]byte, yamuxHeaderSize)
	h[1] = typ
	binary.BigEndian.PutUint32(h[4:], 7)
	binary.BigEndian.PutUint32(h[8:], length)
	return h
}

// TestCoalescedConn: a data frame's header goes out with its body's start
// in one write; other headers pass through alone; every byte arrives once,
// in order.
func TestCoalescedConn(t *testing.T) {
	small := bytes.Repeat([]byte("s"), 100)
	large := bytes.Repeat([]byte("L"), 40<<10)
	tests := []struct {
		name   string
		writes [][]byte
		sizes  []int // the sizes of the writes the connection saw
	}{
		{"small data frame: one write", [][]byte{header(0, 100), small}, []int{112}},
		{"large data frame: a record's worth, then the rest", [][]byte{header(0, 40<<10), large}, []int{16 << 10, 40<<10 - firstWrite}},
		{"window update passes through", [][]byte{header(1, 0)}, []int{12}},
		{"empty data frame (FIN) passes through", [][]byte{header(0, 0)}, []int{12}},
		{"ping, then a data frame", [][]byte{header(2, 0), header(0, 100), small}, []int{12, 112}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log := &writeLog{}
			c := newCoalescedConn(log)
			var want []byte
			for _, w := range tt.writes {
				n, err := c.Write(w)
				if err != nil || n != len(w) {
					t.Fatalf("Write(%d bytes) = %d, %v", len(w), n, err)
				}
				want = append(want, w...)
			}
			var got []byte
			var sizes []int
			for _, w := range log.writes {
				got = append(got, w...)
				sizes = append(sizes, len(w))
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("bytes differ: got %d bytes, want %d", len(got), len(want))
			}
			if !slices.Equal(sizes, tt.sizes) {
				t.Errorf("write sizes = %v, want %v", sizes, tt.sizes)
			}
		})
	}
}

// TestGatherConnOneWritePerFrame: over TLS on a GatherConn, a 64 KiB data
// frame (five TLS records) reaches the socket in one write, a window update
// in one of its own, and the peer decrypts exactly the bytes yamux wrote.
// Ungathered writes (the handshake, alerts) pass straight through.
func TestGatherConnOneWritePerFrame(t *testing.T) {
	pki := newPKI(t)
	a, b := net.Pipe()
	log := &countingConn{Conn: a}
	srv := tls.Server(b, &tls.Config{Certificates: []tls.Certificate{pki.server}, MinVersion: tls.VersionTLS13})
	cli := tls.Client(NewGatherConn(log), &tls.Config{RootCAs: pki.pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13})
	got := make(chan []byte, 1)
	go func() {
		if err := srv.Handshake(); err != nil {
			got <- nil
			return
		}
		buf, _ := io.ReadAll(srv)
		got <- buf
	}()
	if err := cli.Handshake(); err != nil {
		t.Fatal(err)
	}
	c := newCoalescedConn(cli)
	if c.gather == nil {
		t.Fatal("the coalescedConn did not find the GatherConn under its TLS connection")
	}
	body := bytes.Repeat([]byte("0123456789abcdef"), 4<<10) // 64 KiB
	var want []byte
	log.reset()
	for _, w := range [][]byte{header(0, uint32(len(body))), body, header(1, 0)} {
		if _, err := c.Write(w); err != nil {
			t.Fatal(err)
		}
		want = append(want, w...)
	}
	if n := log.count(); n != 2 {
		t.Errorf("a 64 KiB frame and a window update took %d writes to the socket; want 2", n)
	}
	// A relay's chunk to a user, through GatherWrites: one write too.
	log.reset()
	if _, err := GatherWrites(cli).Write(body); err != nil {
		t.Fatal(err)
	}
	want = append(want, body...)
	if n := log.count(); n != 1 {
		t.Errorf("GatherWrites took %d writes to the socket for a 64 KiB chunk; want 1", n)
	}
	if w := GatherWrites(log); w != net.Conn(log) {
		t.Errorf("GatherWrites of a connection without TLS over a GatherConn is %T; want the connection", w)
	}
	_ = cli.Close()
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("the peer read %d bytes; want the %d written, in order", len(b), len(want))
	}
}

// countingConn counts the writes that reach it.
type countingConn struct {
	net.Conn
	mu sync.Mutex
	n  int
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *countingConn) reset() { c.mu.Lock(); c.n = 0; c.mu.Unlock() }

func (c *countingConn) count() int { c.mu.Lock(); defer c.mu.Unlock(); return c.n }
