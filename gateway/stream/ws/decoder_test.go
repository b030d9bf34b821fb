package ws_test

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/gobwas/ws"

	"github.com/limenhq/limen/gateway/stream"
	"github.com/limenhq/limen/gateway/stream/internal/capture"
	wsdec "github.com/limenhq/limen/gateway/stream/ws"
)

// frame encodes one frame; client frames are masked.
func frame(fin bool, op ws.OpCode, client bool, payload []byte) []byte {
	h := ws.Header{Fin: fin, OpCode: op, Length: int64(len(payload))}
	p := bytes.Clone(payload)
	if client {
		h.Masked, h.Mask = true, [4]byte{0xa1, 0xb2, 0xc3, 0xd4}
		ws.Cipher(p, h.Mask, 0)
	}
	var buf bytes.Buffer
	if err := ws.WriteHeader(&buf, h); err != nil {
		panic(err)
	}
	buf.Write(p)
	return buf.Bytes()
}

func msg(client bool, ch byte, data string) []byte {
	return frame(true, ws.OpBinary, client, append([]byte{ch}, data...))
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func newDecoder(t testing.TB, mode wsdec.Mode, client bool, h stream.Handler) *wsdec.Decoder {
	dir := stream.ServerToClient
	if client {
		dir = stream.ClientToServer
	}
	d, err := wsdec.NewDecoder(wsdec.Config{Mode: mode, Direction: dir, Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDecoderAccepts(t *testing.T) {
	status := `{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"42"}]}}`
	tests := []struct {
		name   string
		mode   wsdec.Mode
		client bool
		in     []byte
		want   string
	}{
		{"fragments with a ping between them", wsdec.ModeChannelV4, false, cat(
			frame(false, ws.OpBinary, false, []byte("\x01ab")),
			frame(true, ws.OpPing, false, []byte("x")),
			frame(false, ws.OpContinuation, false, []byte("cd")),
			frame(true, ws.OpContinuation, false, []byte("ef"))),
			"stdout \"abcdef\"\n"},
		{"channel byte in its own fragment", wsdec.ModeChannelV4, false, cat(
			frame(false, ws.OpBinary, false, []byte("\x02")),
			frame(false, ws.OpContinuation, false, nil),
			frame(true, ws.OpContinuation, false, []byte("err"))),
			"stderr \"err\"\n"},
		{"empty messages open channels", wsdec.ModeChannelV4, false, cat(
			frame(true, ws.OpBinary, false, nil), msg(false, 1, ""), msg(false, 2, ""), msg(false, 1, "x")),
			"stdout \"x\"\n"},
		{"status split over messages", wsdec.ModeChannelV5, false, cat(
			msg(false, 3, status[:20]), msg(false, 3, status[20:])),
			"exit 42 NonZeroExitCode \"\"\n"},
		{"two resizes in one message, one split", wsdec.ModeChannelV5, true, cat(
			msg(true, 4, `{"Width":80,"Height":24}{"Width":1`), msg(true, 4, `20,"Height":50}`)),
			"resize 80x24\nresize 120x50\n"},
		{"stdin counted, never shown", wsdec.ModeChannelV5, true, cat(
			msg(true, 0, "password"), frame(true, ws.OpBinary, true, []byte{255, 0})),
			"stdin 8\nclose-channel client→server 0\n"},
		{"v4 ignores the close signal", wsdec.ModeChannelV4, true, frame(true, ws.OpBinary, true, []byte{255, 0, 7}),
			"\n"},
		{"close frame", wsdec.ModeChannelV4, false, frame(true, ws.OpClose, false, []byte{3, 232, 'o', 'k'}),
			"close server→client\n"},
		{"repeated close frame, as wsstream writes it", wsdec.ModeChannelV5, false, cat(
			frame(true, ws.OpClose, false, []byte{3, 232}), frame(true, ws.OpClose, false, []byte{3, 232})),
			"close server→client\n"},
		{"16-bit length", wsdec.ModeChannelV4, false, msg(false, 1, strings.Repeat("z", 300)),
			"stdout \"" + strings.Repeat("z", 300) + "\"\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			log := &capture.Log{}
			d := newDecoder(t, tc.mode, tc.client, log)
			if _, err := d.Write(tc.in); err != nil {
				t.Fatalf("Write: %v", err)
			}
			if err := d.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if got := log.String(); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDecoderRejects(t *testing.T) {
	huge := make([]byte, 10)
	huge[0], huge[1] = 0x82, 127
	binary.BigEndian.PutUint64(huge[2:], 1<<63)
	tests := []struct {
		name   string
		mode   wsdec.Mode
		client bool
		in     []byte
		want   string
	}{
		{"unmasked client frame", wsdec.ModeChannelV4, true, msg(false, 0, "x"), "not masked"},
		{"masked server frame", wsdec.ModeChannelV4, false, msg(true, 1, "x"), "is masked"},
		{"reserved bits (compression)", wsdec.ModeChannelV4, false, []byte{0xc2, 1, 1}, "reserved bits"},
		{"reserved opcode", wsdec.ModeChannelV4, false, []byte{0x83, 0}, "reserved opcode"},
		{"continuation first", wsdec.ModeChannelV4, false, frame(true, ws.OpContinuation, false, []byte("x")), "without a message"},
		{"new message inside a fragmented one", wsdec.ModeChannelV4, false,
			cat(frame(false, ws.OpBinary, false, []byte("\x01a")), msg(false, 1, "b")), "inside a fragmented"},
		{"fragmented ping", wsdec.ModeChannelV4, false, frame(false, ws.OpPing, false, nil), "control frame ping"},
		{"long ping", wsdec.ModeChannelV4, false, frame(true, ws.OpPing, false, make([]byte, 126)), "control frame ping"},
		{"64-bit length with the top bit", wsdec.ModeChannelV4, false, huge, "most significant bit"},
		{"text message", wsdec.ModeChannelV4, false, frame(true, ws.OpText, false, []byte("1hi")), "text message"},
		{"client writes stdout", wsdec.ModeChannelV5, true, msg(true, 1, "x"), "channel 1 is not allowed"},
		{"server writes stdin", wsdec.ModeChannelV5, false, msg(false, 0, "x"), "channel 0 is not allowed"},
		{"unknown channel", wsdec.ModeChannelV5, false, msg(false, 9, "x"), "channel 9"},
		{"close signal without channel", wsdec.ModeChannelV5, true, frame(true, ws.OpBinary, true, []byte{255}), "without a channel"},
		{"close signal too long", wsdec.ModeChannelV5, true, frame(true, ws.OpBinary, true, []byte{255, 0, 1}), "longer than"},
		{"status not json", wsdec.ModeChannelV4, false, msg(false, 3, "nope"), "expected a json object"},
		{"status unknown", wsdec.ModeChannelV4, false, msg(false, 3, `{"status":"Maybe"}`), "unknown status"},
		{"status exit code out of range", wsdec.ModeChannelV4, false,
			msg(false, 3, `{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"-1"}]}}`), "0..255"},
		{"status too large", wsdec.ModeChannelV4, false, msg(false, 3, "{"+strings.Repeat(" ", wsdec.DefaultMaxStatus)), "larger than"},
		{"resize too large", wsdec.ModeChannelV4, true, msg(true, 4, "{"+strings.Repeat(" ", wsdec.DefaultMaxResize)), "larger than"},
		{"resize out of range", wsdec.ModeChannelV4, true, msg(true, 4, `{"Width":70000,"Height":1}`), "parse resize"},
		{"one-byte close payload", wsdec.ModeChannelV4, false, frame(true, ws.OpClose, false, []byte{3}), "1-byte"},
		{"data after close", wsdec.ModeChannelV4, false, cat(frame(true, ws.OpClose, false, nil), msg(false, 1, "x")), "after the close"},
		{"ping after close", wsdec.ModeChannelV4, false, cat(frame(true, ws.OpClose, false, nil), frame(true, ws.OpPing, false, nil)), "after the close"},
		{"bad close after close", wsdec.ModeChannelV4, false, cat(frame(true, ws.OpClose, false, nil), frame(true, ws.OpClose, false, []byte{3})), "1-byte"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newDecoder(t, tc.mode, tc.client, stream.NopHandler{})
			_, err := d.Write(tc.in)
			if err == nil {
				err = d.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got error %v, want one containing %q", err, tc.want)
			}
			if _, again := d.Write([]byte{0}); again == nil {
				t.Error("Write after an error succeeded; errors must be sticky")
			}
		})
	}
}

// TestHugeDeclaredLength: a frame declaring 2^62 bytes is streamed, never
// allocated, and a stream ending inside it is an error.
func TestHugeDeclaredLength(t *testing.T) {
	hdr := make([]byte, 14)
	hdr[0], hdr[1] = 0x82, 0x80|127
	binary.BigEndian.PutUint64(hdr[2:], 1<<62)
	var n int
	h := countStdout{n: &n}
	d := newDecoder(t, wsdec.ModeChannelV4, true, h)
	if _, err := d.Write(hdr); err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := d.Write(chunk); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Errorf("%v allocations per 64 KiB write of a huge frame, want 0", allocs)
	}
	if err := d.Close(); err == nil || !strings.Contains(err.Error(), "inside a frame") {
		t.Errorf("Close inside a huge frame: %v", err)
	}
}

type countStdout struct {
	stream.NopHandler
	n *int
}

func (c countStdout) Stdin(n int) error { *c.n += n; return nil }

func TestModeFor(t *testing.T) {
	for _, p := range []string{"base64.channel.k8s.io", "v4.base64.channel.k8s.io", "channel.k8s.io", ""} {
		if _, err := wsdec.ModeFor(p); err == nil {
			t.Errorf("ModeFor(%q) succeeded; only binary v4/v5 and the SPDY tunnel are decodable", p)
		}
	}
}
