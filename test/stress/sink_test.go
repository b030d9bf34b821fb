package stress

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// The port-forward protocol between a run and the pod's server. The client
// sends a header: one op byte, the run's seed and its size (big endian).
//
//   - opUpload: the client sends the run's data and half-closes; the
//     server reads to EOF and answers the count (8 bytes) and SHA-256 (32)
//     of what it received, then closes.
//   - opDownload: the client half-closes after the header; the server sends
//     the run's data and half-closes, and the client reads to EOF.
//
// Both directions end on EOF, never on a byte count, so a stream that loses
// its tail, adds bytes or drops a half-close fails.
const (
	opUpload   = 'U'
	opDownload = 'D'
	headerLen  = 17
	replyLen   = 8 + 32
)

// sink is the TCP server of the pod: the fake kubelet forwards a pod's port
// to the same port on loopback, where this listens.
type sink struct {
	l       net.Listener
	timeout time.Duration

	mu       sync.Mutex
	received map[uint64]int64 // bytes the server read, by upload seed
}

func startSink(t *testing.T, timeout time.Duration) *sink {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{l: l, timeout: timeout, received: map[uint64]int64{}}
	t.Cleanup(func() { l.Close() })
	go s.serve()
	return s
}

func (s *sink) port() int { return s.l.Addr().(*net.TCPAddr).Port }

func (s *sink) serve() {
	for {
		c, err := s.l.Accept()
		if err != nil {
			return
		}
		go s.handle(c.(*net.TCPConn))
	}
}

func (s *sink) handle(c *net.TCPConn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(s.timeout))
	var hdr [headerLen]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return
	}
	seed, n := binary.BigEndian.Uint64(hdr[1:9]), int64(binary.BigEndian.Uint64(hdr[9:]))
	switch hdr[0] {
	case opUpload:
		t := newTally()
		_, _ = io.Copy(t, c)
		s.mu.Lock()
		s.received[seed] = t.n
		s.mu.Unlock()
		var reply [replyLen]byte
		binary.BigEndian.PutUint64(reply[:8], uint64(t.n))
		sum := t.sum()
		copy(reply[8:], sum[:])
		_, _ = c.Write(reply[:])
	case opDownload:
		if _, err := io.CopyBuffer(c, newStream(seed, n), make([]byte, 256<<10)); err != nil {
			return
		}
		_ = c.CloseWrite()
		_, _ = io.Copy(io.Discard, c) // until the client's half-close
	}
}

// receivedBy is what the server read for an upload, for the failure
// message when its answer never arrived.
func (s *sink) receivedBy(seed uint64) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.received[seed]
	return n, ok
}

// transfer runs one port-forward run through the local address addr.
func (s *sink) transfer(addr string, op byte, seed uint64, n int64) result {
	start := time.Now()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return result{err: fmt.Sprintf("dial the forwarded port: %v", err)}
	}
	defer c.Close()
	tc := c.(*net.TCPConn)
	_ = tc.SetDeadline(start.Add(s.timeout))
	var hdr [headerLen]byte
	hdr[0] = op
	binary.BigEndian.PutUint64(hdr[1:9], seed)
	binary.BigEndian.PutUint64(hdr[9:], uint64(n))
	if _, err := tc.Write(hdr[:]); err != nil {
		return result{err: fmt.Sprintf("send the header: %v", err)}
	}
	var r result
	switch op {
	case opUpload:
		if _, err := io.CopyBuffer(tc, newStream(seed, n), make([]byte, 256<<10)); err != nil {
			r.err = fmt.Sprintf("upload: %v", err)
		}
		_ = tc.CloseWrite()
		reply, err := io.ReadAll(io.LimitReader(tc, replyLen+1))
		r.dur = time.Since(start)
		if len(reply) != replyLen {
			got, ok := s.receivedBy(seed)
			r.err = join(r.err, fmt.Sprintf("the pod's server answered %d bytes, want %d (read error %v); it had received %s", len(reply), replyLen, err, received(got, ok)))
			r.bytes = got
			return r
		}
		r.bytes = int64(binary.BigEndian.Uint64(reply[:8]))
		copy(r.sum[:], reply[8:])
	case opDownload:
		_ = tc.CloseWrite()
		t := newTally()
		_, err := io.CopyBuffer(t, tc, make([]byte, 256<<10))
		r.dur = time.Since(start)
		r.bytes, r.sum = t.n, t.sum()
		if err != nil {
			r.err = fmt.Sprintf("download: %v", err)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				r.err = fmt.Sprintf("download: no EOF within %s", s.timeout)
			}
		}
	}
	return r
}

func received(n int64, ok bool) string {
	if !ok {
		return "nothing yet (the stream never reached EOF)"
	}
	return fmt.Sprintf("%d bytes", n)
}
