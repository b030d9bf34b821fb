package tunnel

import (
	"net"
	"sync"
	"testing"
	"time"
)

// delayRelay forwards TCP connections to target, holding every chunk for
// delay in each direction: a crude WAN link with round trip 2*delay and no
// bandwidth limit, enough to show what the yamux window costs at distance.
type delayRelay struct {
	ln     net.Listener
	target string
	delay  time.Duration
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

func startDelayRelay(tb testing.TB, target string, delay time.Duration) *delayRelay {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	r := &delayRelay{ln: ln, target: target, delay: delay}
	r.wg.Go(r.accept)
	tb.Cleanup(r.stop)
	return r
}

func (r *delayRelay) accept() {
	for {
		in, err := r.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", r.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		r.mu.Lock()
		r.conns = append(r.conns, in, out)
		r.mu.Unlock()
		r.wg.Go(func() { r.pipe(in, out) })
		r.wg.Go(func() { r.pipe(out, in) })
	}
}

type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies src to dst, each chunk delivered delay after it was read.
func (r *delayRelay) pipe(src, dst net.Conn) {
	q := make(chan chunk, 1<<16)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer dst.Close()
		for c := range q {
			time.Sleep(time.Until(c.due))
			if _, err := dst.Write(c.data); err != nil {
				return
			}
		}
	})
	for {
		buf := make([]byte, 64<<10)
		n, err := src.Read(buf)
		if n > 0 {
			q <- chunk{data: buf[:n], due: time.Now().Add(r.delay)}
		}
		if err != nil {
			break
		}
	}
	close(q)
	wg.Wait()
	_ = src.Close()
}

func (r *delayRelay) stop() {
	_ = r.ln.Close()
	r.mu.Lock()
	for _, c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
