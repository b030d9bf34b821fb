package tunnel

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
)

// yamux frame header layout (github.com/hashicorp/yamux, const.go): version,
// type, flags (2 bytes), stream id (4), length (4).
const (
	yamuxHeaderSize = 12
	yamuxTypeData   = 0
)

// firstWrite bounds the body bytes sent together with a held header: one
// TLS record's worth, so that the copy it costs stays small whatever the
// frame's size.
const firstWrite = 16<<10 - yamuxHeaderSize

// coalescedConn is the connection a yamux session writes to. yamux's send
// loop writes a data frame as two writes, its 12-byte header and then its
// body; over TLS each write is its own record and its own system call, so a
// small request or response costs two of each per hop. coalescedConn holds a
// data frame's header back and sends it in one write with the start of the
// body that always follows it.
//
// A frame's body is several TLS records (16 KiB each): when the TLS
// connection runs over a GatherConn, its records are gathered while the
// frame is written and reach the socket in one system call, instead of one
// per record.
//
// Only yamux's send loop writes, from one goroutine, so the held header
// needs no lock. Headers of other frames (window updates, pings, go-away)
// and of empty data frames, which carry no body, pass straight through.
type coalescedConn struct {
	net.Conn
	gather *GatherConn // under the TLS connection; nil if none
	held   bool
	buf    []byte // header, then up to firstWrite bytes of body
}

func newCoalescedConn(c net.Conn) *coalescedConn {
	cc := &coalescedConn{Conn: c, buf: make([]byte, 0, yamuxHeaderSize+firstWrite)}
	if t, ok := c.(*tls.Conn); ok {
		cc.gather, _ = t.NetConn().(*GatherConn)
	}
	return cc
}

func (c *coalescedConn) Write(p []byte) (int, error) {
	if c.held {
		c.held = false
		if c.gather != nil {
			c.gather.start()
		}
		n, err := c.writeFrame(p)
		if c.gather != nil {
			if ferr := c.gather.flush(); err == nil && ferr != nil {
				n, err = 0, ferr
			}
		}
		return n, err
	}
	if len(p) == yamuxHeaderSize && p[1] == yamuxTypeData && binary.BigEndian.Uint32(p[8:]) > 0 {
		c.buf = append(c.buf[:0], p...)
		c.held = true
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// writeFrame writes the held header and the frame's body p.
func (c *coalescedConn) writeFrame(p []byte) (int, error) {
	first := min(len(p), firstWrite)
	c.buf = append(c.buf[:yamuxHeaderSize], p[:first]...)
	n, err := c.Conn.Write(c.buf)
	if n -= yamuxHeaderSize; n < 0 {
		n = 0
	}
	if err != nil || first == len(p) {
		return n, err
	}
	m, err := c.Conn.Write(p[first:])
	return n + m, err
}

// gatherMax bounds what a GatherConn holds before it writes: a 64 KiB
// frame's records and their overhead fit, so a relay's chunk is one write.
const gatherMax = 80 << 10

// GatherConn is the connection under a tunnel's TLS: while the tunnel
// writes a frame, it gathers the TLS records and writes them in one system
// call when the frame is done; every other write (the handshake, alerts, a
// plain HTTP connection's) goes straight through. Wrap the TCP connection
// with it before tls.Server or tls.Client.
type GatherConn struct {
	net.Conn

	mu        sync.Mutex
	gathering bool
	buf       []byte
}

// NewGatherConn wraps c.
func NewGatherConn(c net.Conn) *GatherConn { return &GatherConn{Conn: c} }

// Write holds p while a frame is gathered, else writes it.
func (g *GatherConn) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.gathering {
		return g.Conn.Write(p)
	}
	if len(g.buf)+len(p) > gatherMax {
		if err := g.flushLocked(); err != nil {
			return 0, err
		}
		if len(p) >= gatherMax {
			return g.Conn.Write(p)
		}
	}
	if g.buf == nil {
		g.buf = make([]byte, 0, gatherMax)
	}
	g.buf = append(g.buf, p...)
	return len(p), nil
}

// start gathers the writes that follow, until flush.
func (g *GatherConn) start() {
	g.mu.Lock()
	g.gathering = true
	g.mu.Unlock()
}

// flush writes what was gathered and ends the gathering.
func (g *GatherConn) flush() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gathering = false
	return g.flushLocked()
}

func (g *GatherConn) flushLocked() error {
	if len(g.buf) == 0 {
		return nil
	}
	_, err := g.Conn.Write(g.buf)
	g.buf = g.buf[:0]
	return err
}

// CloseWrite half-closes the connection under it, as relay.CloseWrite asks
// of what a tls.Conn wraps.
func (g *GatherConn) CloseWrite() error {
	if cw, ok := g.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// GatherWrites returns a writer for c whose every Write reaches the socket
// in one system call, all its TLS records at once, when c is a TLS
// connection over a GatherConn (as the proxy's are); otherwise c itself.
// For a relay's chunks to a user: one write per chunk instead of one per
// 16 KiB record.
func GatherWrites(c net.Conn) io.Writer {
	t, ok := c.(*tls.Conn)
	if !ok {
		return c
	}
	g, ok := t.NetConn().(*GatherConn)
	if !ok {
		return c
	}
	return gatheredWriter{t: t, g: g}
}

type gatheredWriter struct {
	t *tls.Conn
	g *GatherConn
}

func (w gatheredWriter) Write(p []byte) (int, error) {
	w.g.start()
	n, err := w.t.Write(p)
	if ferr := w.g.flush(); err == nil && ferr != nil {
		n, err = 0, ferr
	}
	return n, err
}
