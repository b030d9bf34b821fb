package tunnel

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
)

func frame(n uint32, payload string) []byte {
	b := binary.BigEndian.AppendUint32(nil, n)
	return append(b, payload...)
}

// onlyReader hides bytes.Reader's extra methods, so ReadFrame sees a plain
// io.Reader as it does on the network.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func TestReadFrame(t *testing.T) {
	tests := []struct {
		name    string
		in      []byte
		max     int
		want    string
		wantErr error
	}{
		{name: "ok", in: frame(2, "{}"), want: "{}"},
		{name: "clean eof", in: nil, wantErr: io.EOF},
		{name: "short header", in: []byte{0, 0}, wantErr: io.ErrUnexpectedEOF},
		{name: "empty frame", in: frame(0, ""), wantErr: ErrEmptyFrame},
		{name: "truncated payload", in: frame(10, "abc"), wantErr: io.ErrUnexpectedEOF},
		{name: "header only", in: frame(5, ""), wantErr: io.ErrUnexpectedEOF},
		{name: "over default cap", in: frame(MaxFrameSize+1, "x"), wantErr: ErrFrameTooLarge},
		{name: "max uint32", in: frame(0xffffffff, "x"), wantErr: ErrFrameTooLarge},
		{name: "over caller cap", in: frame(9, "123456789"), max: 8, wantErr: ErrFrameTooLarge},
		{name: "exactly caller cap", in: frame(8, "12345678"), max: 8, want: "12345678"},
		{name: "caller cap above hard cap is clamped", in: frame(MaxFrameSize+1, "x"), max: 1 << 30, wantErr: ErrFrameTooLarge},
		{name: "trailing bytes left for next frame", in: frame(1, "a\x00\x00"), want: "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadFrame(onlyReader{bytes.NewReader(tt.in)}, tt.max)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if got != nil {
					t.Fatalf("got payload %q with error", got)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestReadFrameSequence(t *testing.T) {
	var buf bytes.Buffer
	for _, p := range []string{"a", strings.Repeat("b", 300), "c"} {
		if err := WriteFrame(&buf, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	// A one-byte-at-a-time reader exercises headers and payloads split
	// across reads.
	r := io.LimitReader(&oneByteReader{r: &buf}, 1<<20)
	for _, want := range []string{"a", strings.Repeat("b", 300), "c"} {
		got, err := ReadFrame(r, 0)
		if err != nil || string(got) != want {
			t.Fatalf("got %q, %v; want %q", got, err, want)
		}
	}
	if _, err := ReadFrame(r, 0); err != io.EOF {
		t.Fatalf("after last frame err = %v, want io.EOF", err)
	}
}

type oneByteReader struct{ r io.Reader }

func (o *oneByteReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return o.r.Read(p[:1])
}

func TestWriteFrameLimits(t *testing.T) {
	if err := WriteFrame(io.Discard, nil); !errors.Is(err, ErrEmptyFrame) {
		t.Errorf("empty: err = %v", err)
	}
	if err := WriteFrame(io.Discard, make([]byte, MaxFrameSize+1)); !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("oversize: err = %v", err)
	}
	if err := WriteFrame(io.Discard, make([]byte, MaxFrameSize)); err != nil {
		t.Errorf("at cap: err = %v", err)
	}
}

func TestDecodeMessage(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr bool
		want    Message
	}{
		{name: "minimal", in: `{"type":"heartbeat"}`, want: Message{Type: "heartbeat"}},
		{name: "full", in: `{"type":"lock.set","id":7,"reply_to":3,"body":{"user":"a"}}`,
			want: Message{Type: "lock.set", ID: 7, ReplyTo: 3, Body: []byte(`{"user":"a"}`)}},
		{name: "unknown fields ignored", in: `{"type":"x","extra":[1,2]}`, want: Message{Type: "x"}},
		{name: "not json", in: `hello`, wantErr: true},
		{name: "array", in: `[1]`, wantErr: true},
		{name: "null", in: `null`, wantErr: true},
		{name: "no type", in: `{"id":1}`, wantErr: true},
		{name: "type wrong kind", in: `{"type":5}`, wantErr: true},
		{name: "type with space", in: `{"type":"a b"}`, wantErr: true},
		{name: "type with newline", in: `{"type":"a\nb"}`, wantErr: true},
		{name: "type non-ascii", in: `{"type":"é"}`, wantErr: true},
		{name: "type too long", in: `{"type":"` + strings.Repeat("a", maxTypeLen+1) + `"}`, wantErr: true},
		{name: "negative id", in: `{"type":"x","id":-1}`, wantErr: true},
		{name: "trailing garbage", in: `{"type":"x"}x`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeMessage([]byte(tt.in))
			if tt.wantErr {
				if !errors.Is(err, ErrBadMessage) {
					t.Fatalf("err = %v, want ErrBadMessage", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Type != tt.want.Type || got.ID != tt.want.ID || got.ReplyTo != tt.want.ReplyTo ||
				!bytes.Equal(got.Body, tt.want.Body) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestHelloValidate(t *testing.T) {
	long := strings.Repeat("x", maxHelloField+1)
	tests := []struct {
		name string
		h    Hello
		ok   bool
	}{
		{"ok", Hello{Cluster: "c", WorkerID: "w", Version: "v1"}, true},
		{"no version is fine", Hello{Cluster: "c", WorkerID: "w"}, true},
		{"no cluster", Hello{WorkerID: "w"}, false},
		{"no worker", Hello{Cluster: "c"}, false},
		{"long cluster", Hello{Cluster: long, WorkerID: "w"}, false},
		{"long version", Hello{Cluster: "c", WorkerID: "w", Version: long}, false},
	}
	for _, tt := range tests {
		if err := tt.h.validate(); (err == nil) != tt.ok {
			t.Errorf("%s: err = %v", tt.name, err)
		}
	}
}

func TestMessageRoundTrip(t *testing.T) {
	type lock struct{ User string }
	m, err := NewMessage("lock.set", lock{User: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	m.ID = 4
	r, _ := m.Reply("ack", nil)
	if r.ReplyTo != 4 {
		t.Fatalf("reply_to = %d", r.ReplyTo)
	}
	b, err := encodeMessage(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	var l lock
	if err := got.Decode(&l); err != nil || l.User != "alice" {
		t.Fatalf("decode = %+v, %v", l, err)
	}
	if err := (Message{Type: "x"}).Decode(&l); !errors.Is(err, ErrBadMessage) {
		t.Fatalf("empty body decode err = %v", err)
	}
	if _, err := encodeMessage(Message{}); !errors.Is(err, ErrBadMessage) {
		t.Fatalf("encode without type err = %v", err)
	}
}

// FuzzReadFrame feeds arbitrary bytes to the control-stream reader: it must
// never panic, never return a frame above the cap, and anything it accepts
// must survive a write/read round trip.
func FuzzReadFrame(f *testing.F) {
	f.Add(frame(2, "{}"), 0)
	f.Add(frame(20, `{"type":"heartbeat"}`), 16)
	f.Add(frame(0xffffffff, "x"), 0)
	f.Add(append(frame(1, "a"), frame(3, "bcd")...), 2)
	f.Add([]byte{0, 0, 0}, 0)
	f.Fuzz(func(t *testing.T, data []byte, max int) {
		r := bytes.NewReader(data)
		limit := max
		if limit <= 0 || limit > MaxFrameSize {
			limit = MaxFrameSize
		}
		for {
			p, err := ReadFrame(r, max)
			if err != nil {
				if p != nil {
					t.Fatalf("payload returned with error %v", err)
				}
				return
			}
			if len(p) == 0 || len(p) > limit {
				t.Fatalf("frame of %d bytes accepted with limit %d", len(p), limit)
			}
			var buf bytes.Buffer
			if err := WriteFrame(&buf, p); err != nil {
				t.Fatalf("rewrite: %v", err)
			}
			q, err := ReadFrame(&buf, max)
			if err != nil || !bytes.Equal(p, q) {
				t.Fatalf("round trip: %v", err)
			}
			if m, err := decodeMessage(p); err == nil {
				if _, err := encodeMessage(m); err != nil {
					t.Fatalf("decoded message does not re-encode: %v", err)
				}
			}
		}
	})
}
