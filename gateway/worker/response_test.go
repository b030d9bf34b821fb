package worker

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/relay"
	"github.com/limenhq/limen/gateway/sessions"
)

// sizedReader returns reads of the sizes given in turn (then EOF) and
// records the buffer size of every Read.
type sizedReader struct {
	data  []byte
	sizes []int
	bufs  []int
}

func (r *sizedReader) Read(p []byte) (int, error) {
	r.bufs = append(r.bufs, len(p))
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(r.data))
	if len(r.sizes) > 0 {
		n = min(n, r.sizes[0])
		r.sizes = r.sizes[1:]
	}
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

// TestCopyBodyIsExactAndSmallWhenIdle: every byte arrives in order, a
// body that fills its buffer gets the large one, and one that trickles
// is read with the small one again.
func TestCopyBodyIsExactAndSmallWhenIdle(t *testing.T) {
	data := make([]byte, 1<<20)
	_, _ = rand.Read(data)
	for name, r := range map[string]io.Reader{
		"whole":    bytes.NewReader(data),
		"one byte": iotest.OneByteReader(bytes.NewReader(data)),
		"halves":   iotest.HalfReader(bytes.NewReader(data)),
		"data+EOF": iotest.DataErrReader(bytes.NewReader(data)),
	} {
		var out bytes.Buffer
		if err := copyBody(&out, r); err != nil || !bytes.Equal(out.Bytes(), data) {
			t.Fatalf("%s: copied %d of %d bytes (err %v), or not the same bytes", name, out.Len(), len(data), err)
		}
	}

	// A LIST (full reads), then a watch's trickle of events.
	r := &sizedReader{data: make([]byte, 200<<10), sizes: []int{smallRead, 32 << 10, 32 << 10, 100, 100, 100}}
	if err := copyBody(io.Discard, r); err != nil {
		t.Fatal(err)
	}
	if r.bufs[0] != smallRead || r.bufs[1] != 32<<10 || r.bufs[2] != 32<<10 || r.bufs[3] != 32<<10 {
		t.Fatalf("buffer sizes %v: want small, then large while reads fill it", r.bufs)
	}
	if r.bufs[4] != smallRead || r.bufs[5] != smallRead {
		t.Fatalf("buffer sizes %v: a trickling body must be read with the small buffer", r.bufs)
	}

	broken := errors.New("connection reset")
	if err := copyBody(io.Discard, iotest.ErrReader(broken)); !errors.Is(err, broken) {
		t.Fatalf("read error %v, want it returned", err)
	}
}

// TestEndReasonAfterAnOutsideEnd: a decoder's complaint while a locked
// stream is torn down does not hide the lock; one before it does.
func TestEndReasonAfterAnOutsideEnd(t *testing.T) {
	bad := errors.New("websocket server→client: websocket binary frame after the close frame")
	for _, tt := range []struct {
		name string
		late bool
		want string
	}{
		{"refused while the lock tore the stream down", true, audit.EndLocked},
		{"refused before the lock", false, audit.EndDecodeFailed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(context.Background())
			client, _ := net.Pipe()
			defer client.Close()
			s := &session{up: nopCloser{}, x: &exchange{stream: client}}
			if !tt.late {
				s.refuse(bad)
			}
			cancel(&sessions.Ended{Reason: sessions.ReasonLocked})
			s.ended = ctx
			if tt.late {
				s.refuse(bad)
			}
			if got, _ := s.endReason(ctx, relay.Result{Ended: true}); got != tt.want {
				t.Fatalf("end reason %q, want %q", got, tt.want)
			}
		})
	}
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

// writes records each write it is given.
type writes struct{ got [][]byte }

func (w *writes) Write(p []byte) (int, error) {
	w.got = append(w.got, bytes.Clone(p))
	return len(p), nil
}

// headFirst is a body whose first Read checks that the head was written
// already, as a streamed response's must be before its first event.
type headFirst struct {
	io.Reader
	w       *writes
	checked bool
	early   bool
}

func (h *headFirst) Read(p []byte) (int, error) {
	if !h.checked {
		h.checked, h.early = true, len(h.w.got) > 0
	}
	return h.Reader.Read(p)
}

// TestResponseLeavesInOneWritePerRead: the event and head of a response go
// out with its first body bytes in one write to the tunnel stream (one
// frame, one TLS record), a chunked body's size, bytes and end in one write
// per read, and a streamed response's head at once, before its body is
// read; the bytes are those the proxy parses.
func TestResponseLeavesInOneWritePerRead(t *testing.T) {
	get := func(body io.Reader, length int64) *http.Response {
		return &http.Response{StatusCode: 200, ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{"Content-Type": {"application/json"}},
			ContentLength: length, Body: io.NopCloser(body)}
	}
	for _, tt := range []struct {
		name     string
		body     []byte
		length   int64
		sizes    []int
		streamed bool
		writes   int
	}{
		{"GET, its length known", []byte(`{"kind":"ConfigMap"}`), 20, nil, false, 1},
		{"LIST, chunked", make([]byte, 200<<10), -1, []int{smallRead, 32 << 10, 32 << 10, 32 << 10, 32 << 10, 32 << 10, 32 << 10}, false, 9},
		{"watch", []byte("event-1\nevent-2\n"), -1, []int{8, 8}, true, 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := &writes{}
			fw := &frameWriter{w: w}
			ev := audit.Event{Type: audit.TypeKubeRequest, Time: time.Now(), Cluster: "demo", SessionID: "0123456789abcdef0123456789abcdef",
				Kube: &audit.KubeRequest{Method: "GET", Path: "/api", Status: 200}}
			if err := audit.WriteEvent(fw, ev); err != nil {
				t.Fatal(err)
			}
			body := &headFirst{Reader: &sizedReader{data: tt.body, sizes: slices.Clone(tt.sizes)}, w: w}
			if err := writeResponse(fw, http.MethodGet, get(body, tt.length), tt.streamed); err != nil {
				t.Fatal(err)
			}
			if len(w.got) > tt.writes {
				t.Errorf("%d writes, want at most %d", len(w.got), tt.writes)
			}
			if body.early != tt.streamed {
				t.Errorf("head written before the body was read: %v, want %v", body.early, tt.streamed)
			}
			br := bufio.NewReader(bytes.NewReader(bytes.Join(w.got, nil)))
			if got, err := audit.ReadEvent(br, 0); err != nil || got.SessionID != ev.SessionID {
				t.Fatalf("event %+v, %v", got, err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			if err != nil || !bytes.Equal(b, tt.body) {
				t.Fatalf("body of %d bytes (%v), want the %d sent", len(b), err, len(tt.body))
			}
		})
	}
}

// slowWriter copies what it is given after a pause, as a tunnel stream
// waiting for its window does.
type slowWriter struct{ got []byte }

func (w *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(time.Millisecond)
	w.got = append(w.got, p...)
	return len(p), nil
}

// TestFrameWritersShareNoBytes: many streams write through frameWriters at
// once, their buffers borrowed from one pool: each stream's bytes are its
// own and whole (a buffer given back before its write was done would carry
// another stream's response, and its audit event, onto this one).
func TestFrameWritersShareNoBytes(t *testing.T) {
	const streams, rounds = 16, 20
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() {
			w := &slowWriter{}
			fw := &frameWriter{w: w}
			var want []byte
			for r := range rounds {
				p := bytes.Repeat([]byte{byte('a' + i)}, 100+r)
				want = append(want, p...)
				_, _ = fw.Write(p)
				if err := fw.Flush(); err != nil {
					t.Error(err)
					return
				}
			}
			if !bytes.Equal(w.got, want) {
				t.Errorf("stream %d received %d bytes not all its own", i, len(w.got))
			}
		})
	}
	wg.Wait()
}

// TestOrdinaryResponseLeavesAsItArrives: a response that is not a stream
// by its request, but whose body the API server holds open, still reaches
// the proxy read by read: its event, head and first bytes are written
// before the body's next read returns (the stand-in of the proxy's
// watchdog test hung when they waited for the body's end).
func TestOrdinaryResponseLeavesAsItArrives(t *testing.T) {
	w := &writes{}
	fw := &frameWriter{w: w}
	held := readFunc(func([]byte) (int, error) {
		if len(w.got) == 0 {
			return 0, errors.New("the body's next read came before anything was written")
		}
		return 0, io.EOF
	})
	resp := &http.Response{StatusCode: 200, ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{}, ContentLength: -1,
		Body: io.NopCloser(io.MultiReader(bytes.NewReader([]byte("first\n")), held))}
	if err := writeResponse(fw, http.MethodGet, resp, false); err != nil {
		t.Fatal(err)
	}
}

type readFunc func([]byte) (int, error)

func (f readFunc) Read(p []byte) (int, error) { return f(p) }
