package relay

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
)

func TestBodyWritesEachReadAndFlushes(t *testing.T) {
	pool := sync.Pool{New: func() any { b := make([]byte, 64); return &b }}
	// Reads of 8 bytes fill the small buffer, so Body borrows a large one;
	// the one-byte tail gives it back.
	src := strings.Repeat("x", 200) + "y"
	var dst bytes.Buffer
	flushes := 0
	err := Body(&dst, iotest.OneByteReader(strings.NewReader(src)), 1, &pool, func() error { flushes++; return nil })
	if err != nil || dst.String() != src {
		t.Fatalf("Body: %v, %d bytes, want %d", err, dst.Len(), len(src))
	}
	if flushes != len(src) {
		t.Errorf("flushed %d times for %d one-byte reads, want one flush a read", flushes, len(src))
	}
}

func TestBodyReturnsTheFirstError(t *testing.T) {
	pool := sync.Pool{New: func() any { b := make([]byte, 64); return &b }}
	cut := errors.New("stream cut")
	err := Body(io.Discard, io.MultiReader(strings.NewReader("abc"), iotest.ErrReader(cut)), 2, &pool, nil)
	if !errors.Is(err, cut) {
		t.Fatalf("Body = %v, want the source's error", err)
	}
	flushErr := errors.New("client gone")
	err = Body(io.Discard, strings.NewReader("abc"), 2, &pool, func() error { return flushErr })
	if !errors.Is(err, flushErr) {
		t.Fatalf("Body = %v, want the flush's error", err)
	}
}

func TestDropHopHeaders(t *testing.T) {
	h := http.Header{
		"Connection":        {"close, X-Secret-Hop", " keep-alive "},
		"X-Secret-Hop":      {"1"},
		"Keep-Alive":        {"timeout=5"},
		"Transfer-Encoding": {"chunked"},
		"Upgrade":           {"websocket"},
		"Content-Type":      {"application/json"},
	}
	DropHopHeaders(h)
	if len(h) != 1 || h.Get("Content-Type") != "application/json" {
		t.Fatalf("after DropHopHeaders: %v, want only Content-Type", h)
	}
}
