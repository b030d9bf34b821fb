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
	mu    sync.Mutex
	conns []*teeConn
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
}

func (c *teeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.in.Write(p[:n])
	c.mu.Unlock()
	return n, err
}

func (c *teeConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.mu.Lock()
	c.out.Write(p[:n])
	c.mu.Unlock()
	return n, err
}

// serve starts a loopback server for h whose connections are recorded.
func serve(h http.Handler) (*httptest.Server, *recorder) {
	srv := httptest.NewUnstartedServer(h)
	rec := &recorder{Listener: srv.Listener}
	srv.Listener = rec
	srv.Start()
	return srv, rec
}
