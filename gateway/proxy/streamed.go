package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"golang.org/x/net/http/httpguts"

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

// forward relays r over its tunnel stream (st): a stream that is no upgrade
// (a watch, a followed log) by relayStream, every other request by
// ReverseProxy.
func (k *Kube) forward(w http.ResponseWriter, r *http.Request, st *relayState) {
	if !st.streamed || r.Header.Get("Upgrade") != "" || !plainQuery(r.URL.RawQuery) {
		k.relayProxy().ServeHTTP(w, r)
		return
	}
	if body, rc := k.relayStream(w, r, st); body != nil {
		copyStreamed(w, body, rc)
	}
}

// relayStream sends a streamed request as ReverseProxy would and relays the
// response's head, returning its body for copyStreamed and the controller
// that flushes it; a nil body once the request is answered. It does without
// ReverseProxy's frames on the stack an idle watch parks on for its whole
// life (nearly 1 KiB: a parked goroutine's stack shrinks only to four times
// what it uses) and without its copy of the request: r is the handler's own
// shallow copy (Kube.admit), whose headers are dropped of what ReverseProxy
// drops (hop-by-hop, Forwarded, X-Forwarded-*) in place.
func (k *Kube) relayStream(w http.ResponseWriter, r *http.Request, st *relayState) (io.ReadCloser, *http.ResponseController) {
	h := r.Header
	trailers := httpguts.HeaderValuesContainsToken(h["Te"], "trailers")
	relay.DropHopHeaders(h)
	if trailers {
		h.Set("Te", "trailers")
	}
	for _, name := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
		h.Del(name)
	}
	if _, ok := h["User-Agent"]; !ok {
		h.Set("User-Agent", "") // so that Write sends none, not Go's
	}
	u := *r.URL
	r.URL, r.Close = &u, false
	st.toWorker(r)
	if r.ContentLength == 0 {
		r.Body = nil
	}
	resp, err := streamTransport{k: k}.RoundTrip(r)
	if err != nil {
		k.relayError(w, r, err)
		return nil, nil
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// Unasked; relayUpgrade refuses it as ReverseProxy's ModifyResponse.
		if err = k.relayUpgrade(resp); err != nil {
			resp.Body.Close()
			k.relayError(w, r, err)
		}
		return nil, nil
	}
	return resp.Body, writeStreamedHead(w, resp)
}

// plainQuery reports whether ReverseProxy would forward the query as it is:
// one it would clean (a semicolon, a part that does not parse) goes through
// ReverseProxy, which drops those parts.
func plainQuery(q string) bool {
	if q == "" {
		return true
	}
	if strings.Contains(q, ";") {
		return false
	}
	_, err := url.ParseQuery(q)
	return err == nil
}

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

// relayStreamed writes resp to w: for a stream (streamed), the head flushed
// and then every read of the body flushed as it arrives (copyStreamed); any
// other response in large writes. A body that ends in error (the worker's
// stream cut, the client gone) aborts the handler, as ReverseProxy does.
func relayStreamed(w http.ResponseWriter, resp *http.Response, streamed bool) {
	if streamed {
		copyStreamed(w, resp.Body, writeStreamedHead(w, resp))
		return
	}
	defer resp.Body.Close()
	copyHead(w, resp)
	// Not a stream: its head leaves with the start of its body, and a short
	// body's end with it, one write to the client instead of three; a long
	// one in large writes (relay.Bulk), flushed after a short read only when
	// its length is unknown.
	var flush func() error
	if resp.ContentLength < 0 {
		flush = http.NewResponseController(w).Flush
	}
	buf := bulkBuffers.Get().(*[]byte)
	defer bulkBuffers.Put(buf)
	if err := relay.Bulk(w, resp.Body, *buf, flush); err != nil {
		panic(http.ErrAbortHandler)
	}
}

// copyHead writes resp's head to w, less its hop-by-hop headers.
func copyHead(w http.ResponseWriter, resp *http.Response) {
	relay.DropHopHeaders(resp.Header)
	h := w.Header()
	for name, values := range resp.Header {
		h[name] = append(h[name], values...)
	}
	w.WriteHeader(resp.StatusCode)
}

// writeStreamedHead writes and flushes resp's head to w, and returns the
// controller that flushes w: a watch's head must not wait for its first
// event. A failed flush aborts the handler, as ReverseProxy does.
func writeStreamedHead(w http.ResponseWriter, resp *http.Response) *http.ResponseController {
	copyHead(w, resp)
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		resp.Body.Close()
		panic(http.ErrAbortHandler)
	}
	return rc
}

// copyStreamed copies body to w, flushing every read as it arrives, and
// closes it. A body that ends in error (the worker's stream cut, the client
// gone) aborts the handler, as ReverseProxy does. An idle watch parks here
// for its whole life: the frames below stay small.
func copyStreamed(w http.ResponseWriter, body io.ReadCloser, rc *http.ResponseController) {
	defer body.Close()
	if err := relay.Body(w, body, smallRead, &copyBufferPool, rc.Flush); err != nil {
		panic(http.ErrAbortHandler)
	}
}
