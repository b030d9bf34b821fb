package tunnel

import (
	"context"
	"io"
	"net"
	"reflect"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"github.com/hashicorp/yamux"
)

// TestStreamShrinksOnlyWhenIdle: a bulk stream read in small pieces (each
// read catching up with the sender, as a relay to a slow user does) keeps
// its receive buffer instead of having yamux allocate a frame's worth
// again after each one; once the stream trickles, its emptied buffer is
// released within shrinkAfter.
func TestStreamShrinksOnlyWhenIdle(t *testing.T) {
	const total, frame = 32 << 20, 1 << 20
	pki := newPKI(t)
	srv := &Server{Timing: testTiming()}
	p := startProxy(t, pki, srv, "127.0.0.1:0")
	more := make(chan struct{})
	wk := newWorker(t, pki, p.addr(), "c1", "w1", func(_ context.Context, c net.Conn) {
		buf := make([]byte, frame)
		for sent := 0; sent < total; sent += frame {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
		<-more
		_, _ = c.Write([]byte("x"))
		_ = c.Close()
	})
	startWorker(t, wk)
	eventually(t, "worker connected", func() bool { return srv.Connected("c1") })
	c, err := srv.Open(context.Background(), "c1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	buf := make([]byte, 2<<10) // under shrinkBelow
	for got := 0; got < total; {
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	runtime.ReadMemStats(&after)
	// Both ends run here: TLS, yamux's buffer as it grows and the test's
	// own buffers allocate too (about half of total); a frame's buffer
	// after each catch-up would be more than total again.
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("reading %d MiB allocated %d MiB", total>>20, alloc>>20)
	if alloc > total && !raceEnabled { // the race detector allocates on its own
		t.Errorf("reading %d MiB in 2 KiB reads allocated %d MiB: the receive buffer was released and allocated again while the stream was busy", total>>20, alloc>>20)
	}

	close(more)
	if _, err := io.ReadFull(c, buf[:1]); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the idle stream's buffer released", func() bool { return recvBufNil(c.(stream).Stream) })
}

// recvBufNil reports whether yamux holds no receive buffer for st, read
// under yamux's own lock of it.
func recvBufNil(st *yamux.Stream) bool {
	v := reflect.ValueOf(st).Elem()
	mu := (*sync.Mutex)(unsafe.Pointer(v.FieldByName("recvLock").UnsafeAddr()))
	mu.Lock()
	defer mu.Unlock()
	return v.FieldByName("recvBuf").IsNil()
}
