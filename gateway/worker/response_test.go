package worker

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"testing"
	"testing/iotest"

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
