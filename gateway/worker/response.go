package worker

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"

	"github.com/limenhq/limen/gateway/kstatus"
	"github.com/limenhq/limen/gateway/relay"
)

// HTTP/1.1 responses written to the tunnel stream: the API server's,
// relayed as they arrive, and the worker's own refusals.

// writeResponse writes resp as HTTP/1.1 to w, flushing w after every read
// of the body, so that watches, followed logs and any response the API
// server streams reach the user as they arrive, and after the head too when
// the response is streamed (a watch's head must not wait for its first
// event). Whatever w holds at a flush (the audit event ahead of the head,
// the head, a chunk's size, its bytes and its end) leaves in one write: one
// tunnel frame and one TLS record where each was one of its own, and a
// response whose body comes in one read is a single write, its event
// included.
func writeResponse(w *frameWriter, method string, resp *http.Response, streamed bool) error {
	noBody := method == http.MethodHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified
	length := int64(-1)
	if noBody || resp.ContentLength >= 0 {
		length = resp.ContentLength
	}
	if err := writeHead(w, resp, length, false); err != nil {
		return err
	}
	if noBody {
		return w.Flush()
	}
	if streamed {
		if err := w.Flush(); err != nil {
			return err
		}
	}
	copyBody := func(dst io.Writer) error {
		if streamed {
			return copyBodyFlushed(dst, resp.Body, w.Flush)
		}
		// Not a stream: in frames of up to the frame buffer's size
		// (frameWriter.Write sends a full one), flushed after a short
		// read only when the length is unknown (relay.Bulk).
		var flush func() error
		if length < 0 {
			flush = w.Flush
		}
		buf := bodyBuffers.Get().(*[]byte)
		defer bodyBuffers.Put(buf)
		return relay.Bulk(dst, resp.Body, *buf, flush)
	}
	if length >= 0 {
		if err := copyBody(w); err != nil {
			return err
		}
		return w.Flush()
	}
	cw := httputil.NewChunkedWriter(w)
	if err := copyBody(cw); err != nil {
		return err
	}
	if err := cw.Close(); err != nil {
		return err
	}
	if _, err := io.WriteString(w, "\r\n"); err != nil {
		return err
	}
	return w.Flush()
}

// frameWriter gathers writes until Flush and sends them in one write. It
// holds a buffer only between a write and the next Flush, borrowed from
// frameBuffers: an idle watch holds none.
type frameWriter struct {
	w   io.Writer
	buf *[]byte
}

// frameBuffers hold a large body read with its chunk size and end.
var frameBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 32<<10+64); return &b }}

func (f *frameWriter) Write(p []byte) (int, error) {
	if f.buf == nil {
		f.buf = frameBuffers.Get().(*[]byte)
	}
	b := *f.buf
	if len(b)+len(p) > cap(b) {
		if err := f.Flush(); err != nil {
			return 0, err
		}
		if len(p) > cap(b) {
			return f.w.Write(p)
		}
		f.buf = frameBuffers.Get().(*[]byte)
		b = *f.buf
	}
	*f.buf = append(b, p...)
	return len(p), nil
}

// Flush sends what was written since the last Flush, and gives the buffer
// back.
func (f *frameWriter) Flush() error {
	if f.buf == nil {
		return nil
	}
	var err error
	if b := *f.buf; len(b) > 0 {
		_, err = f.w.Write(b)
	}
	// Only once written: the next stream to borrow it overwrites it.
	*f.buf = (*f.buf)[:0]
	frameBuffers.Put(f.buf)
	f.buf = nil
	return err
}

// bodyBuffers are the large buffers a busy response body borrows.
var bodyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// smallRead is the buffer a response body is read with while it trickles.
const smallRead = 2 << 10

// copyBody copies src to dst, writing each read at once (a watch event or
// a log line reaches the user as it arrives). An idle watch or a quiet log
// spends its life blocked in Read, so it reads into a small buffer, and
// borrows a large one from a pool only while reads fill the buffer: a LIST
// moves in large writes, an idle watch holds 2 KiB.
func copyBody(dst io.Writer, src io.Reader) error { return copyBodyFlushed(dst, src, nil) }

// copyBodyFlushed is copyBody calling flush, if not nil, after each write.
func copyBodyFlushed(dst io.Writer, src io.Reader, flush func() error) error {
	return relay.Body(dst, src, smallRead, &bodyBuffers, flush)
}

func writeHead(w io.Writer, resp *http.Response, length int64, upgrade bool) error {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %03d %s\r\n", resp.StatusCode, http.StatusText(resp.StatusCode))
	h := resp.Header.Clone()
	for _, name := range relay.HopHeaders {
		h.Del(name)
	}
	h.Del("Content-Length")
	switch {
	case upgrade:
		h.Set("Connection", "Upgrade")
		h.Set("Upgrade", resp.Header.Get("Upgrade"))
	case length >= 0:
		h.Set("Content-Length", strconv.FormatInt(length, 10))
	default:
		h.Set("Transfer-Encoding", "chunked")
	}
	_ = h.Write(&b)
	b.WriteString("\r\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeStatusResponse writes a complete response carrying a Kubernetes
// Status, as the API server words its own errors.
func writeStatusResponse(w io.Writer, code int, reason, msg string) error {
	h, body := kstatus.RefusalReason(code, reason, msg)
	if err := writeHead(w, &http.Response{StatusCode: code, Header: h}, int64(len(body)), false); err != nil {
		return err
	}
	_, err := w.Write(body)
	return err
}

// errWriter keeps the error of the first failed write, which tells a
// client gone from an API server gone.
type errWriter struct {
	w     io.Writer
	err   error
	wrote bool // a write succeeded: the proxy has the audit event
}

func (e *errWriter) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if err != nil && e.err == nil {
		e.err = err
	}
	if err == nil {
		e.wrote = true
	}
	return n, err
}
