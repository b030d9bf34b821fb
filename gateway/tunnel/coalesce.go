package tunnel

import (
	"encoding/binary"
	"net"
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
// Only yamux's send loop writes, from one goroutine, so the held header
// needs no lock. Headers of other frames (window updates, pings, go-away)
// and of empty data frames, which carry no body, pass straight through.
type coalescedConn struct {
	net.Conn
	held bool
	buf  []byte // header, then up to firstWrite bytes of body
}

func newCoalescedConn(c net.Conn) *coalescedConn {
	return &coalescedConn{Conn: c, buf: make([]byte, 0, yamuxHeaderSize+firstWrite)}
}

func (c *coalescedConn) Write(p []byte) (int, error) {
	if c.held {
		c.held = false
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
	if len(p) == yamuxHeaderSize && p[1] == yamuxTypeData && binary.BigEndian.Uint32(p[8:]) > 0 {
		c.buf = append(c.buf[:0], p...)
		c.held = true
		return len(p), nil
	}
	return c.Conn.Write(p)
}
