package proxy

import (
	"fmt"
	"net/http"
	"sync"

	"github.com/limenhq/limen/gateway/relay"
)

// A streamed response (a watch, a followed log: a request the session
// registry lists) is relayed here instead of by ReverseProxy's copy, whose
// buffer an idle watch would hold all its life: the body is read into a
// small buffer while it trickles and into a pooled one only while reads
// fill it (as the worker's copyBody), each read written and flushed at
// once. What ReverseProxy would do with the head (hop-by-hop headers
// dropped, the rest copied) and with a body cut short (the handler
// aborted, so the client sees a reset and never a clean end) is kept.

// errStreamRelayed tells the ErrorHandler, as errUpgraded does, that the
// response was relayed to its end: there is nothing left to answer.
var errStreamRelayed = fmt.Errorf("streamed response relayed: %w", errUpgraded)

// smallRead is the buffer a streamed body is read with while it trickles:
// a watch event of an ordinary object fits.
const smallRead = 1 << 10

// relayResponse is the relay's ModifyResponse: an upgrade goes to
// relayUpgrade, a streamed response is relayed here (relayStreamed), and
// any other response is left to ReverseProxy.
func (k *Kube) relayResponse(resp *http.Response) error {
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return k.relayUpgrade(resp)
	}
	st := resp.Request.Context().Value(relayKey{}).(*relayState)
	if st.live == nil {
		return nil
	}
	relayStreamed(st.w, resp, st.streamed)
	return errStreamRelayed
}

// bulkBuffers carry the body of a response that is not a stream (a LIST):
// written unflushed in large pieces, it leaves in full HTTP/2 frames and
// TLS records, not one small frame, record and system call per read.
var bulkBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// relayStreamed writes resp to w: for a stream (streamed), the head and then
// every read of the body flushed as it arrives; any other response in large
// writes. A body that ends in error (the worker's stream cut, the client
// gone) aborts the handler, as ReverseProxy does.
func relayStreamed(w http.ResponseWriter, resp *http.Response, streamed bool) {
	defer resp.Body.Close()
	relay.DropHopHeaders(resp.Header)
	h := w.Header()
	for name, values := range resp.Header {
		h[name] = append(h[name], values...)
	}
	w.WriteHeader(resp.StatusCode)
	if !streamed {
		// Not a stream: its head leaves with the start of its body, and a
		// short body's end with it, one write to the client instead of
		// three; a long one in large writes (relay.Bulk), flushed after a
		// short read only when its length is unknown.
		var flush func() error
		if resp.ContentLength < 0 {
			flush = http.NewResponseController(w).Flush
		}
		buf := bulkBuffers.Get().(*[]byte)
		defer bulkBuffers.Put(buf)
		if err := relay.Bulk(w, resp.Body, *buf, flush); err != nil {
			panic(http.ErrAbortHandler)
		}
		return
	}
	// A stream's head leaves at once: a watch's must not wait for its
	// first event.
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		panic(http.ErrAbortHandler)
	}
	if err := relay.Body(w, resp.Body, smallRead, &copyBufferPool, rc.Flush); err != nil {
		panic(http.ErrAbortHandler)
	}
}
