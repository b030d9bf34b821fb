package spdy_test

import (
	"bytes"
	"encoding/binary"
	"net/http"
	"strings"
	"testing"

	mspdy "github.com/moby/spdystream/spdy"

	"github.com/limenhq/limen/gateway/stream"
	"github.com/limenhq/limen/gateway/stream/internal/capture"
	"github.com/limenhq/limen/gateway/stream/spdy"
)

// wire encodes frames for one direction with its own compression context.
type wire struct {
	buf bytes.Buffer
	f   *mspdy.Framer
}

func newWire(t testing.TB) *wire {
	w := &wire{}
	f, err := mspdy.NewFramer(&w.buf, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.f = f
	return w
}

func (w *wire) syn(id uint32, kv ...string) *wire {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	if err := w.f.WriteFrame(&mspdy.SynStreamFrame{StreamId: mspdy.StreamId(id), Headers: h}); err != nil {
		panic(err)
	}
	return w
}

func (w *wire) data(id uint32, fin bool, p string) *wire {
	fr := &mspdy.DataFrame{StreamId: mspdy.StreamId(id), Data: []byte(p)}
	if fin {
		fr.Flags = mspdy.DataFlagFin
	}
	if err := w.f.WriteFrame(fr); err != nil {
		panic(err)
	}
	return w
}

func (w *wire) raw(b ...byte) *wire { w.buf.Write(b); return w }

func (w *wire) frame(fr mspdy.Frame) *wire {
	if err := w.f.WriteFrame(fr); err != nil {
		panic(err)
	}
	return w
}

// run decodes client bytes then server bytes and returns the log and error.
func run(t *testing.T, proto string, opts spdy.Options, client, server *wire) (string, error) {
	log := &capture.Log{}
	s, err := spdy.NewSession(proto, log, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		d *spdy.Decoder
		w *wire
	}{{s.Client(), client}, {s.Server(), server}} {
		if _, err := step.d.Write(step.w.buf.Bytes()); err != nil {
			return log.String(), err
		}
		if err := step.d.Close(); err != nil {
			return log.String(), err
		}
	}
	return log.String(), nil
}

func TestSessionAccepts(t *testing.T) {
	tests := []struct {
		name           string
		proto          string
		client, server func(*wire)
		want           string
	}{
		{"v1 text error means failure", spdy.ProtocolV1,
			func(w *wire) { w.syn(1, "streamType", "error").syn(3, "streamType", "stdout") },
			func(w *wire) { w.data(3, false, "out").data(1, false, "it ").data(1, true, "broke") },
			"stdout \"out\"\nexit 1  \"it broke\"\n"},
		{"v3 empty error stream means success", spdy.ProtocolV3,
			func(w *wire) { w.syn(1, "streamType", "error") },
			func(w *wire) { w.data(1, true, "") },
			"exit 0  \"\"\n"},
		{"v2 error text without FIN is reported at the end", spdy.ProtocolV2,
			func(w *wire) { w.syn(1, "streamType", "error") },
			func(w *wire) { w.data(1, false, "late") },
			"exit 1  \"late\"\n"},
		{"data on an unknown or reset stream is dropped", spdy.ProtocolV4,
			func(w *wire) {
				w.syn(1, "streamType", "stdout").frame(&mspdy.RstStreamFrame{StreamId: 1, Status: mspdy.Cancel})
			},
			func(w *wire) { w.data(1, false, "gone").data(7, false, "never") },
			"\n"},
		{"resize split across frames", spdy.ProtocolV4,
			func(w *wire) {
				w.syn(1, "streamType", "resize").data(1, false, `{"Width":9`).data(1, false, `0,"Height":30}`)
			},
			func(w *wire) {},
			"resize 90x30\n"},
		{"port-forward counts both ways", spdy.ProtocolPortForward,
			func(w *wire) { w.syn(1, "streamType", "data", "port", "5432").data(1, true, "query") },
			func(w *wire) { w.data(1, true, "result!") },
			"port-data 5432 client→server 5\nport-data 5432 server→client 7\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, s := newWire(t), newWire(t)
			tc.client(c)
			tc.server(s)
			got, err := run(t, tc.proto, spdy.Options{}, c, s)
			if err != nil {
				t.Fatalf("decode: %v\n%s", err, got)
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSessionRejects(t *testing.T) {
	big := make([]byte, 8)
	binary.BigEndian.PutUint32(big[0:], 0x80030001)
	binary.BigEndian.PutUint32(big[4:], 1<<20)
	tests := []struct {
		name   string
		proto  string
		opts   spdy.Options
		client func(*wire)
		server func(*wire)
		want   string
	}{
		{"control frame above the cap", spdy.ProtocolV4, spdy.Options{}, func(w *wire) { w.raw(big...) }, nil, "exceeds"},
		{"SPDY/2 control frame", spdy.ProtocolV4, spdy.Options{}, func(w *wire) { w.raw(0x80, 2, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1) }, nil, "version 2"},
		{"unknown control frame type", spdy.ProtocolV4, spdy.Options{}, func(w *wire) { w.raw(0x80, 3, 0, 0x0a, 0, 0, 0, 0) }, nil, "control frame"},
		{"data frame on stream 0", spdy.ProtocolV4, spdy.Options{}, func(w *wire) { w.raw(0, 0, 0, 0, 0, 0, 0, 1, 'x') }, nil, "stream 0"},
		{"unknown stream type", spdy.ProtocolV4, spdy.Options{}, func(w *wire) { w.syn(1, "streamType", "shell") }, nil, `"shell" is not valid`},
		{"port-forward type in exec", spdy.ProtocolV4, spdy.Options{}, func(w *wire) { w.syn(1, "streamType", "data", "port", "80") }, nil, "not valid for exec"},
		{"port-forward without port", spdy.ProtocolPortForward, spdy.Options{}, func(w *wire) { w.syn(1, "streamType", "data") }, nil, "invalid port"},
		{"port 0", spdy.ProtocolPortForward, spdy.Options{}, func(w *wire) { w.syn(1, "streamType", "error", "port", "0") }, nil, "invalid port"},
		{"stream id reused", spdy.ProtocolV4, spdy.Options{}, func(w *wire) { w.syn(3, "streamType", "stdin").syn(1, "streamType", "stdout") }, nil, "ids must increase"},
		{"too many streams", spdy.ProtocolV4, spdy.Options{MaxStreams: 2}, func(w *wire) {
			w.syn(1, "streamType", "stdin").syn(3, "streamType", "stdout").syn(5, "streamType", "stderr")
		}, nil, "more than 2 streams"},
		{"client writes to stdout", spdy.ProtocolV4, spdy.Options{}, func(w *wire) { w.syn(1, "streamType", "stdout").data(1, false, "x") }, nil, "data on a \"stdout\" stream"},
		{"server writes to stdin", spdy.ProtocolV4, spdy.Options{}, func(w *wire) { w.syn(1, "streamType", "stdin") },
			func(w *wire) { w.data(1, false, "x") }, "data on a \"stdin\" stream"},
		{"corrupt header block", spdy.ProtocolV4, spdy.Options{}, func(w *wire) {
			w.raw(0x80, 3, 0, 1, 0, 0, 0, 14, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef)
		}, nil, "control frame"},
		{"RST_STREAM longer than its fields", spdy.ProtocolV4, spdy.Options{}, func(w *wire) {
			w.raw(0x80, 3, 0, 3, 0, 0, 0, 12, 0, 0, 0, 1, 0, 0, 0, 5, 0, 0, 0, 0)
		}, nil, "beyond its fields"},
		{"status cut by FIN", spdy.ProtocolV4, spdy.Options{}, func(w *wire) { w.syn(1, "streamType", "error") },
			func(w *wire) { w.data(1, true, `{"status":`) }, "inside a JSON object"},
		{"status too large", spdy.ProtocolV4, spdy.Options{MaxStatus: 16}, func(w *wire) { w.syn(1, "streamType", "error") },
			func(w *wire) { w.data(1, false, `{"status":"Success","message":"long"}`) }, "larger than 16"},
		{"stream ends inside a frame", spdy.ProtocolV4, spdy.Options{}, func(w *wire) { w.raw(0x80, 3) }, nil, "inside a frame"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, s := newWire(t), newWire(t)
			tc.client(c)
			if tc.server != nil {
				tc.server(s)
			}
			_, err := run(t, tc.proto, tc.opts, c, s)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestHugeDataFrame: a data frame declaring 16 MiB is streamed as it
// arrives; nothing of its declared size is allocated.
func TestHugeDataFrame(t *testing.T) {
	var n int
	s, err := spdy.NewSession(spdy.ProtocolPortForward, counter{n: &n}, spdy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := newWire(t).syn(1, "streamType", "data", "port", "80")
	c.raw(0, 0, 0, 1, 0, 0xff, 0xff, 0xff)
	if _, err := s.Client().Write(c.buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := s.Client().Write(chunk); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Errorf("%v allocations per 64 KiB of a huge data frame, want 0", allocs)
	}
	if n != 101*len(chunk) {
		t.Errorf("counted %d bytes, want %d", n, 101*len(chunk))
	}
	if err := s.Client().Close(); err == nil {
		t.Error("Close inside a data frame succeeded")
	}
}

type counter struct {
	stream.NopHandler
	n *int
}

func (c counter) PortData(_ uint16, _ stream.Direction, n int) error { *c.n += n; return nil }

func TestNewSessionRejectsUnknownProtocol(t *testing.T) {
	if _, err := spdy.NewSession("v9.channel.k8s.io", stream.NopHandler{}, spdy.Options{}); err == nil {
		t.Error("unknown protocol accepted")
	}
}
