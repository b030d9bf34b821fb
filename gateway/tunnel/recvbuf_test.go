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

// TestStreamBufferOnlyWhileUnread: a bulk stream read in small pieces (each
// read catching up with the sender, as a relay to a slow user does) does not
// allocate its receive buffer again and again, and a stream whose reader
// has caught up holds no receive buffer at all (an idle watch's stream
// keeps nothing of the frames it carried).
func TestStreamBufferOnlyWhileUnread(t *testing.T) {
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
	buf := make([]byte, 2<<10)
	for got := 0; got < total; {
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	runtime.ReadMemStats(&after)
	// Both ends run here: TLS and the test's own buffers allocate too;
	// a receive buffer allocated again after each catch-up (upstream
	// yamux after a Shrink) would be a frame's worth each time, more than
	// total again.
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("reading %d MiB allocated %d MiB", total>>20, alloc>>20)
	if alloc > total/2 && !raceEnabled { // the race detector allocates on its own
		t.Errorf("reading %d MiB in 2 KiB reads allocated %d MiB: the receive buffer was allocated again while the stream was busy", total>>20, alloc>>20)
	}

	close(more)
	if _, err := io.ReadFull(c, buf[:1]); err != nil {
		t.Fatal(err)
	}
	if n := heldChunks(c.(stream).Stream); n != 0 {
		t.Errorf("a stream read to its end holds %d receive buffer chunks, want none", n)
	}
}

// heldChunks is the number of receive buffer chunks yamux holds for st,
// read under yamux's own lock of it.
func heldChunks(st *yamux.Stream) int {
	v := reflect.ValueOf(st).Elem()
	mu := (*sync.Mutex)(unsafe.Pointer(v.FieldByName("recvLock").UnsafeAddr()))
	mu.Lock()
	defer mu.Unlock()
	buf := v.FieldByName("recvBuf")
	if buf.IsNil() {
		return 0
	}
	return buf.Elem().FieldByName("chunks").Len() - int(buf.Elem().FieldByName("head").Int())
}
