package relay

import (
	"io"
	"net/http"
	"net/textproto"
	"strings"
	"sync"
)

// Body copies the body of a streamed response (a watch, a followed log, a
// LIST) from src to dst, writing each read at once so that an event or a
// log line reaches the user as it arrives, and calling flush, if not nil,
// after each write.
//
// An idle watch or a quiet log spends its life blocked in Read, so Body
// reads into a buffer of small bytes and borrows a large one from pool
// (which holds *[]byte) only while reads fill the buffer: a LIST moves in
// large writes, an idle watch holds small bytes.
func Body(dst io.Writer, src io.Reader, small int, pool *sync.Pool, flush func() error) error {
	own := make([]byte, small)
	buf := own
	var big *[]byte
	defer func() {
		if big != nil {
			pool.Put(big)
		}
	}()
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if _, err := dst.Write(buf[:n]); err != nil {
				return err
			}
			if flush != nil {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
		switch {
		case big == nil && n == len(buf):
			big = pool.Get().(*[]byte)
			buf = *big
		case big != nil && n < small:
			pool.Put(big)
			big, buf = nil, own
		}
	}
}

// HopHeaders are the headers of one connection, never relayed (RFC 9110
// §7.6.1), as ReverseProxy drops them.
var HopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// DropHopHeaders deletes the hop-by-hop headers from h, and those its
// Connection header names.
func DropHopHeaders(h http.Header) {
	for _, v := range h["Connection"] {
		for _, name := range strings.Split(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range HopHeaders {
		h.Del(name)
	}
}
