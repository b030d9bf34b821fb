// Package relay joins the two connections of an upgraded stream (exec,
// attach, port-forward) so that each direction ends on its own.
//
// A TCP peer that closes a socket while bytes it has not read are queued,
// or that receives bytes after it closed, answers with a reset, and a
// reset makes the kernel drop whatever that peer had not yet sent. A relay
// that closes both connections as soon as one direction ends therefore
// loses the tail of the other direction whenever the far side is still
// sending. Here a direction whose source ends is passed on as a half-close
// (CloseWrite) of its destination, its source is read to the end, and the
// connections are closed only when both directions are done — or at once
// when the caller's context ends (lock, kill, expiry, shutdown).
package relay

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
)

// Conn is one side of a relayed stream.
type Conn interface {
	io.Reader
	io.Writer
	// CloseWrite ends the bytes sent to this side; reading continues.
	CloseWrite() error
	// Close ends both directions.
	Close() error
}

// Flow copies one direction from src to dst. It returns nil when src ended
// cleanly (io.EOF) and otherwise the error that ended it. A Flow may hold
// bytes back and may write bytes of its own before it returns (the worker
// holds an unfinished frame back and ends a truncated stream with a
// failure the client understands).
type Flow func(dst io.Writer, src io.Reader) error

// Copy is the plain Flow.
func Copy(dst io.Writer, src io.Reader) error {
	_, err := io.CopyBuffer(dst, onlyReader{src}, make([]byte, bufferSize))
	return err
}

// bufferSize is the copy buffer of each direction.
const bufferSize = 64 << 10

// onlyReader hides WriteTo so io.CopyBuffer uses the buffer it is given.
type onlyReader struct{ io.Reader }

// Direction is how one direction ended.
type Direction struct {
	// Err is nil when the source ended cleanly, else what ended the flow.
	Err error
	// WriteFailed is set when the destination refused bytes: it is gone,
	// and what the source sent afterwards was read and dropped.
	WriteFailed bool
}

// Result is how both directions ended.
type Result struct {
	// AToB carries a's bytes to b, BToA b's bytes to a.
	AToB, BToA Direction
	// Ended is set when ctx ended the relay before both directions were done.
	Ended bool
}

// Run relays between a and b until both directions are done or ctx ends,
// then closes both. Each direction runs its Flow; when the Flow returns,
// its destination is half-closed and its source is drained (read and
// dropped) to its end, so this side never closes a connection the peer is
// still writing to. A destination that fails a write is not written again;
// its own direction ends when its peer hangs up.
func Run(ctx context.Context, a, b Conn, aToB, bToA Flow) Result {
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			_ = a.Close()
			_ = b.Close()
		})
	}
	ended := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		close(ended)
		closeBoth()
	})
	var res Result
	var wg sync.WaitGroup
	wg.Go(func() { res.AToB = run(b, a, aToB) })
	wg.Go(func() { res.BToA = run(a, b, bToA) })
	wg.Wait()
	if !stop() {
		<-ended // ctx ended: AfterFunc has closed both
		res.Ended = true
	}
	closeBoth()
	return res
}

// run is one direction: the flow, then the half-close, then the drain.
func run(dst, src Conn, flow Flow) Direction {
	w := &trackedWriter{w: dst}
	err := flow(w, src)
	_ = dst.CloseWrite()
	drain(src)
	return Direction{Err: err, WriteFailed: w.failed}
}

// drain reads src to its end. Reading until the peer's end keeps this side
// from closing with unread bytes (which would reset the connection).
func drain(src io.Reader) {
	buf := make([]byte, 4<<10)
	for {
		if _, err := src.Read(buf); err != nil {
			return
		}
	}
}

// trackedWriter remembers that a write failed and fails every later one, so
// a flow that ignores the error cannot write into a connection in an
// unknown state.
type trackedWriter struct {
	w      io.Writer
	failed bool
	err    error
}

func (t *trackedWriter) Write(p []byte) (int, error) {
	if t.failed {
		return 0, t.err
	}
	n, err := t.w.Write(p)
	if err != nil {
		t.failed, t.err = true, err
	}
	return n, err
}

// CloseWrite half-closes a network connection: for TLS a close_notify
// alert followed by a TCP FIN (crypto/tls sends only the alert), for TCP
// and anything else with CloseWrite, that method. A connection that cannot
// half-close (net.Pipe) is closed: its peer must learn of the end, even at
// the cost of the other direction.
func CloseWrite(c net.Conn) error {
	if t, ok := c.(*tls.Conn); ok {
		err := t.CloseWrite()
		if cw, ok := t.NetConn().(interface{ CloseWrite() error }); ok {
			err = errors.Join(err, cw.CloseWrite())
		}
		return err
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// NetConn adapts a net.Conn to Conn, half-closing with CloseWrite. Reads
// go through r when it is not nil (a bufio.Reader holding bytes read past
// an HTTP head).
func NetConn(c net.Conn, r io.Reader) Conn {
	if r == nil {
		r = c
	}
	return netConn{Reader: r, c: c}
}

type netConn struct {
	io.Reader
	c net.Conn
}

func (n netConn) Write(p []byte) (int, error) { return n.c.Write(p) }
func (n netConn) CloseWrite() error           { return CloseWrite(n.c) }
func (n netConn) Close() error                { return n.c.Close() }
