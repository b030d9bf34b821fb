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
)

// HTTP/1.1 responses written to the tunnel stream: the API server's,
// relayed as they arrive, and the worker's own refusals.

var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// writeResponse writes resp as HTTP/1.1, chunk by chunk as the body arrives,
// so watches and followed logs reach the user at once.
func writeResponse(w io.Writer, method string, resp *http.Response) error {
	noBody := method == http.MethodHead || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified
	if noBody || resp.ContentLength >= 0 {
		if err := writeHead(w, resp, resp.ContentLength, false); err != nil || noBody {
			return err
		}
		return copyBody(w, resp.Body)
	}
	if err := writeHead(w, resp, -1, false); err != nil {
		return err
	}
	cw := httputil.NewChunkedWriter(w)
	if err := copyBody(cw, resp.Body); err != nil {
		return err
	}
	if err := cw.Close(); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\r\n")
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
func copyBody(dst io.Writer, src io.Reader) error {
	small := make([]byte, smallRead)
	buf := small
	var big *[]byte
	defer func() {
		if big != nil {
			bodyBuffers.Put(big)
		}
	}()
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if _, err := dst.Write(buf[:n]); err != nil {
				return err
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
			big = bodyBuffers.Get().(*[]byte)
			buf = *big
		case big != nil && n < smallRead:
			bodyBuffers.Put(big)
			big, buf = nil, small
		}
	}
}

func writeHead(w io.Writer, resp *http.Response, length int64, upgrade bool) error {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %03d %s\r\n", resp.StatusCode, http.StatusText(resp.StatusCode))
	h := resp.Header.Clone()
	for _, name := range hopHeaders {
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
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if err != nil && e.err == nil {
		e.err = err
	}
	return n, err
}
