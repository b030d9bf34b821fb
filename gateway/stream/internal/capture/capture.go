// Package capture records genuine Kubernetes streaming sessions — the real
// client-go executors and port-forward dialers against the real kubelet
// streaming handlers — so the decoders' golden tests run on kubectl-shaped
// bytes. It is used only by tests (with -update) and listens on loopback only.
package capture

import (
	"bytes"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"
)

// Session is one recorded connection after the HTTP upgrade.
type Session struct {
	// Protocol is the negotiated protocol (Sec-WebSocket-Protocol or X-Stream-Protocol-Version).
	Protocol string
	// Client is what the client sent after its request headers.
	Client []byte
	// Server is what the server sent after its 101 response headers.
	Server []byte
}

// recorder keeps the bytes of every connection its listener accepted.
type recorder struct {
	net.Listener
	handlers sync.WaitGroup // handlers still running (and writing)
	mu       sync.Mutex
	conns    []*teeConn
}

// finish waits for the handlers to return, so that no frame is cut in the
// middle, then closes the connections.
func (r *recorder) finish(srv *httptest.Server) error {
	done := make(chan struct{})
	go func() { r.handlers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		return errors.New("capture: server handler did not return")
	}
	r.quiesce(150*time.Millisecond, 5*time.Second)
	srv.CloseClientConnections()
	return nil
}

// quiesce waits until no connection moved a byte for idle, so that frames
// still being written (field by field, by spdystream) are complete.
func (r *recorder) quiesce(idle, max time.Duration) {
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) {
		last := time.Time{}
		r.mu.Lock()
		for _, c := range r.conns {
			c.mu.Lock()
			if c.last.After(last) {
				last = c.last
			}
			c.mu.Unlock()
		}
		r.mu.Unlock()
		if time.Since(last) >= idle {
			return
		}
		time.Sleep(idle / 3)
	}
}

func (r *recorder) Accept() (net.Conn, error) {
	c, err := r.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &teeConn{Conn: c}
	r.mu.Lock()
	r.conns = append(r.conns, tc)
	r.mu.Unlock()
	return tc, nil
}

// upgraded returns the one connection that switched protocols.
func (r *recorder) upgraded() (Session, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		c.mu.Lock()
		in, out := bytes.Clone(c.in.Bytes()), bytes.Clone(c.out.Bytes())
		c.mu.Unlock()
		if !bytes.HasPrefix(out, []byte("HTTP/1.1 101")) {
			continue
		}
		return split(in, out)
	}
	return Session{}, errors.New("capture: no upgraded connection")
}

// split removes the HTTP request and response heads.
func split(in, out []byte) (Session, error) {
	sep := []byte("\r\n\r\n")
	i, o := bytes.Index(in, sep), bytes.Index(out, sep)
	if i < 0 || o < 0 {
		return Session{}, errors.New("capture: incomplete HTTP head")
	}
	resp, err := http.ReadResponse(bufioReader(out[:o+4]), nil)
	if err != nil {
		return Session{}, err
	}
	proto := resp.Header.Get("Sec-WebSocket-Protocol")
	if proto == "" {
		proto = resp.Header.Get("X-Stream-Protocol-Version")
	}
	return Session{Protocol: proto, Client: in[i+4:], Server: out[o+4:]}, nil
}

// teeConn records both directions of a server-side connection.
type teeConn struct {
	net.Conn
	mu      sync.Mutex
	in, out bytes.Buffer
	last    time.Time // of the last byte moved
}

func (c *teeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.in.Write(p[:n])
	c.last = time.Now()
	c.mu.Unlock()
	return n, err
}

func (c *teeConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.mu.Lock()
	c.out.Write(p[:n])
	c.last = time.Now()
	c.mu.Unlock()
	return n, err
}

// serve starts a loopback server for h whose connections are recorded.
func serve(h http.Handler) (*httptest.Server, *recorder) {
	rec := &recorder{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.handlers.Add(1)
		defer rec.handlers.Done()
		h.ServeHTTP(w, r)
	}))
	rec.Listener = srv.Listener
	srv.Listener = rec
	srv.Start()
	return srv, rec
}
