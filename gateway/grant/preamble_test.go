package grant

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
)

func TestPreambleRoundTripLeavesRest(t *testing.T) {
	token := []byte("a-token")
	var buf bytes.Buffer
	if err := WritePreamble(&buf, token); err != nil {
		t.Fatal(err)
	}
	buf.WriteString("GET /api HTTP/1.1\r\n")
	// One byte at a time: the reader must cope with short reads.
	r := bufio.NewReader(iotest.OneByteReader(&buf))
	got, err := ReadPreamble(r, 0)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "a-token" {
		t.Fatalf("token = %q", got)
	}
	rest, _ := io.ReadAll(r)
	if string(rest) != "GET /api HTTP/1.1\r\n" {
		t.Fatalf("preamble reader consumed the request: rest = %q", rest)
	}
}

func TestWritePreambleRefuses(t *testing.T) {
	if err := WritePreamble(io.Discard, nil); err == nil {
		t.Error("empty token accepted")
	}
	if err := WritePreamble(io.Discard, make([]byte, MaxTokenSize+1)); err == nil {
		t.Error("oversized token accepted")
	}
	broken := errors.New("broken pipe")
	if err := WritePreamble(errWriter{broken}, []byte("x")); !errors.Is(err, broken) {
		t.Errorf("write error = %v, want it wrapped", err)
	}
}

func header(n uint32) []byte {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], n)
	return b[:]
}

func TestReadPreambleHostile(t *testing.T) {
	tests := []struct {
		name  string
		input []byte
		max   int
		want  error
	}{
		{"empty stream", nil, 0, io.EOF},
		{"partial length", []byte{0, 0}, 0, ErrPreamble},
		{"zero length", header(0), 0, ErrPreamble},
		{"4 GiB length", header(0xffffffff), 0, ErrPreamble},
		{"over MaxTokenSize", header(MaxTokenSize + 1), 0, ErrPreamble},
		{"over caller max", append(header(11), make([]byte, 11)...), 10, ErrPreamble},
		{"caller max above hard cap is clamped", header(MaxTokenSize + 1), 1 << 30, ErrPreamble},
		{"truncated token", append(header(10), "abc"...), 0, ErrPreamble},
		{"length only", header(10), 0, ErrPreamble},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadPreamble(bytes.NewReader(tt.input), tt.max)
			if !errors.Is(err, tt.want) {
				t.Fatalf("error = %v, want %v", err, tt.want)
			}
		})
	}
	transport := errors.New("connection reset")
	if _, err := ReadPreamble(iotest.ErrReader(transport), 0); !errors.Is(err, transport) || errors.Is(err, ErrPreamble) {
		t.Errorf("transport error = %v, want it wrapped and not ErrPreamble", err)
	}
}

func TestReadPreambleHostileLengthDoesNotAllocate(t *testing.T) {
	in := append(header(0xfffffff0), "short"...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 100 {
		if _, err := ReadPreamble(bytes.NewReader(in), 0); err == nil {
			t.Fatal("hostile length accepted")
		}
	}
	runtime.ReadMemStats(&after)
	// A buffer of the claimed size would be 4 GiB per call.
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Fatalf("refusing 100 hostile lengths allocated %d bytes", grew)
	}
}

func FuzzReadPreamble(f *testing.F) {
	var buf bytes.Buffer
	_ = WritePreamble(&buf, []byte("token"))
	f.Add(buf.Bytes(), 0)
	f.Add(header(0xffffffff), 100)
	f.Add([]byte{0, 0, 0, 1, 'x', 'y'}, 1)
	f.Fuzz(func(t *testing.T, in []byte, max int) {
		r := bytes.NewReader(in)
		tok, err := ReadPreamble(r, max)
		if err != nil {
			return
		}
		limit := max
		if limit <= 0 || limit > MaxTokenSize {
			limit = MaxTokenSize
		}
		if len(tok) == 0 || len(tok) > limit {
			t.Fatalf("accepted a %d-byte token with limit %d", len(tok), limit)
		}
		// Exactly header plus token consumed, and they round-trip.
		if consumed := len(in) - r.Len(); consumed != 4+len(tok) {
			t.Fatalf("consumed %d bytes for a %d-byte token", consumed, len(tok))
		}
		var out bytes.Buffer
		if err := WritePreamble(&out, tok); err != nil || !strings.HasPrefix(string(in), out.String()) {
			t.Fatalf("re-encoding differs: %v", err)
		}
	})
}

type errWriter struct{ err error }

func (w errWriter) Write([]byte) (int, error) { return 0, w.err }
