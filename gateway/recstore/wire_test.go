package recstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
)

const sumA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

func rawHeader(magic string, idLen int, id string, size uint64, sum []byte) []byte {
	b := []byte(magic)
	b = append(b, byte(idLen))
	b = append(b, id...)
	b = binary.BigEndian.AppendUint64(b, size)
	return append(b, sum...)
}

// TestReadHeader: a header is read exactly, and anything AppendHeader
// would not write is refused — before any of it reaches a path or a size.
func TestReadHeader(t *testing.T) {
	good, err := AppendHeader(nil, Header{ID: "s1", Size: 42, SHA256: sumA})
	if err != nil {
		t.Fatal(err)
	}
	sum := good[len(good)-32:]
	tests := []struct {
		name string
		in   []byte
		want error // nil: accepted
	}{
		{"good", good, nil},
		{"empty", nil, io.EOF},
		{"magic cut short", []byte("LRU"), io.ErrUnexpectedEOF},
		{"wrong magic", rawHeader("LRU2", 2, "s1", 42, sum), ErrBadHeader},
		{"an HTTP request", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n" + strings.Repeat("x", 200)), ErrBadHeader},
		{"empty id", rawHeader(headerMagic, 0, "", 42, sum), ErrBadHeader},
		{"id over 128 bytes", rawHeader(headerMagic, 129, strings.Repeat("a", 129), 42, sum), ErrBadHeader},
		{"id ..", rawHeader(headerMagic, 2, "..", 42, sum), ErrBadHeader},
		{"id with a slash", rawHeader(headerMagic, 4, "a/..", 42, sum), ErrBadHeader},
		{"id with a backslash", rawHeader(headerMagic, 4, `a\..`, 42, sum), ErrBadHeader},
		{"id with a NUL", rawHeader(headerMagic, 3, "a\x00b", 42, sum), ErrBadHeader},
		{"id starting with a dot", rawHeader(headerMagic, 3, ".ab", 42, sum), ErrBadHeader},
		{"size past int64", rawHeader(headerMagic, 2, "s1", 1<<63, sum), ErrBadHeader},
		{"checksum cut short", rawHeader(headerMagic, 2, "s1", 42, sum[:31]), io.ErrUnexpectedEOF},
		{"id cut short", []byte(headerMagic + "\x05ab"), io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			if tt.want == nil {
				in = append(in, "after"...)
			}
			r := bytes.NewReader(in)
			h, err := ReadHeader(r)
			if tt.want == nil {
				if err != nil || h != (Header{ID: "s1", Size: 42, SHA256: sumA}) {
					t.Fatalf("ReadHeader = %+v, %v", h, err)
				}
				if rest, _ := io.ReadAll(r); string(rest) != "after" {
					t.Fatalf("ReadHeader read past the header: %q left", rest)
				}
				return
			}
			if !errors.Is(err, ErrBadHeader) {
				t.Fatalf("ReadHeader = %+v, %v; want ErrBadHeader", h, err)
			}
		})
	}
}

// TestAppendHeaderRefuses: the worker cannot write a header the proxy
// would refuse.
func TestAppendHeaderRefuses(t *testing.T) {
	for _, h := range []Header{
		{ID: "", Size: 1, SHA256: sumA},
		{ID: "../x", Size: 1, SHA256: sumA},
		{ID: "s1", Size: -1, SHA256: sumA},
		{ID: "s1", Size: 1, SHA256: strings.ToUpper(sumA)},
		{ID: "s1", Size: 1, SHA256: sumA[:62]},
		{ID: "s1", Size: 1, SHA256: ""},
	} {
		if _, err := AppendHeader(nil, h); !errors.Is(err, ErrBadHeader) {
			t.Errorf("AppendHeader(%+v) = %v, want ErrBadHeader", h, err)
		}
	}
}

func rawReply(status byte, off uint64, sum []byte, reasonLen int, reason string) []byte {
	b := []byte{status}
	b = binary.BigEndian.AppendUint64(b, off)
	s := make([]byte, 32)
	copy(s, sum)
	b = append(b, s...)
	b = binary.BigEndian.AppendUint16(b, uint16(reasonLen))
	return append(b, reason...)
}

// TestReadReply: the worker reads the proxy's answers as strictly.
func TestReadReply(t *testing.T) {
	sum := bytes.Repeat([]byte{0xab}, 32)
	tests := []struct {
		name string
		in   []byte
		want Reply // zero: refused
	}{
		{"resume", rawReply('R', 7, nil, 0, ""), Reply{Status: Resume, Offset: 7}},
		{"stored", rawReply('S', 9, sum, 0, ""), Reply{Status: Stored, Offset: 9, SHA256: strings.Repeat("ab", 32)}},
		{"refused", rawReply('X', 0, nil, 4, "full"), Reply{Status: Refused, Reason: "full"}},
		{"unknown status", rawReply('Z', 0, nil, 0, ""), Reply{}},
		{"resume with a checksum", rawReply('R', 0, sum, 0, ""), Reply{}},
		{"resume with a reason", rawReply('R', 0, nil, 1, "x"), Reply{}},
		{"stored with a reason", rawReply('S', 0, sum, 1, "x"), Reply{}},
		{"refusal without a reason", rawReply('X', 0, nil, 0, ""), Reply{}},
		{"refusal with an offset", rawReply('X', 5, nil, 1, "x"), Reply{}},
		{"reason over the limit", rawReply('X', 0, nil, MaxReason+1, strings.Repeat("x", MaxReason+1)), Reply{}},
		{"reason with a newline", rawReply('X', 0, nil, 3, "a\nb"), Reply{}},
		{"reason with an escape", rawReply('X', 0, nil, 3, "a\x1bb"), Reply{}},
		{"reason not UTF-8", rawReply('X', 0, nil, 2, "\xff\xfe"), Reply{}},
		{"reason cut short", rawReply('X', 0, nil, 10, "abc"), Reply{}},
		{"offset past int64", rawReply('R', 1<<63, nil, 0, ""), Reply{}},
		{"cut short", rawReply('R', 0, nil, 0, "")[:20], Reply{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := bytes.NewReader(tt.in)
			got, err := ReadReply(r)
			if tt.want == (Reply{}) {
				if err == nil {
					t.Fatalf("ReadReply accepted %+v", got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ReadReply = %+v, %v; want %+v", got, err, tt.want)
			}
			if r.Len() != 0 {
				t.Fatalf("%d bytes left unread", r.Len())
			}
		})
	}
}

// TestRefusalIsAlwaysSendable: whatever an error says, the refusal built
// from it is a valid reply.
func TestRefusalIsAlwaysSendable(t *testing.T) {
	for _, msg := range []string{"", "line\nbreak", "\xff bad utf-8", strings.Repeat("é", MaxReason)} {
		r := refusal(errors.New(msg))
		if _, err := AppendReply(nil, r); err != nil {
			t.Errorf("refusal(%q) = %+v: %v", msg, r, err)
		}
	}
}

// FuzzReadHeader: whatever a worker sends, ReadHeader never panics, reads
// at most MaxHeaderSize bytes, and what it accepts encodes back to exactly
// the bytes it read.
func FuzzReadHeader(f *testing.F) {
	good, _ := AppendHeader(nil, Header{ID: "s1", Size: 42, SHA256: sumA})
	f.Add(good)
	f.Add(rawHeader(headerMagic, 4, "../x", 1, good[len(good)-32:]))
	f.Add([]byte("LRU1\xff"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		h, err := ReadHeader(r)
		read := len(in) - r.Len()
		if read > MaxHeaderSize {
			t.Fatalf("read %d bytes, more than a header", read)
		}
		if err != nil {
			return
		}
		if !validName.MatchString(h.ID) || h.Size < 0 {
			t.Fatalf("accepted %+v", h)
		}
		back, err := AppendHeader(nil, h)
		if err != nil || !bytes.Equal(back, in[:read]) {
			t.Fatalf("accepted %+v from %x, encodes to %x (%v)", h, in[:read], back, err)
		}
	})
}

// FuzzReadReply: whatever a proxy sends, ReadReply never panics, and what
// it accepts encodes back to exactly the bytes it read.
func FuzzReadReply(f *testing.F) {
	for _, r := range []Reply{{Status: Resume, Offset: 3}, {Status: Stored, Offset: 3, SHA256: sumA}, {Status: Refused, Reason: "no"}} {
		b, _ := AppendReply(nil, r)
		f.Add(b)
	}
	f.Add(rawReply('X', 0, nil, 0xffff, "x"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		got, err := ReadReply(r)
		if err != nil {
			return
		}
		read := len(in) - r.Len()
		back, err := AppendReply(nil, got)
		if err != nil || !bytes.Equal(back, in[:read]) {
			t.Fatalf("accepted %+v from %x, encodes to %x (%v)", got, in[:read], back, err)
		}
	})
}
