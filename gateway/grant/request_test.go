package grant

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func validRequest() Request {
	return Request{
		SessionID:   "0123456789abcdef0123456789abcdef",
		ClientAddr:  "192.0.2.7:51234",
		TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}
}

// TestPreambleWithRequestLeavesRest: grant, then request, then the HTTP
// request, each read exactly.
func TestPreambleWithRequestLeavesRest(t *testing.T) {
	var buf bytes.Buffer
	if err := WritePreamble(&buf, []byte("a-token")); err != nil {
		t.Fatal(err)
	}
	if err := WriteRequest(&buf, validRequest()); err != nil {
		t.Fatal(err)
	}
	buf.WriteString("GET /api HTTP/1.1\r\n")
	r := bufio.NewReader(iotest.OneByteReader(&buf))
	if tok, err := ReadPreamble(r, 0); err != nil || string(tok) != "a-token" {
		t.Fatalf("token %q, %v", tok, err)
	}
	got, err := ReadRequest(r)
	if err != nil {
		t.Fatal(err)
	}
	if got != validRequest() {
		t.Fatalf("request = %+v, want %+v", got, validRequest())
	}
	if rest, _ := io.ReadAll(r); string(rest) != "GET /api HTTP/1.1\r\n" {
		t.Fatalf("rest = %q", rest)
	}
}

func TestWriteRequestRefuses(t *testing.T) {
	tests := []struct {
		name string
		mut  func(*Request)
	}{
		{"no session id", func(r *Request) { r.SessionID = "" }},
		{"short session id", func(r *Request) { r.SessionID = "abc" }},
		{"upper-case session id", func(r *Request) { r.SessionID = strings.ToUpper(r.SessionID) }},
		{"bad traceparent", func(r *Request) { r.TraceParent = "00-xyz" }},
		{"zero trace id", func(r *Request) { r.TraceParent = "00-00000000000000000000000000000000-00f067aa0ba902b7-01" }},
		{"control byte in address", func(r *Request) { r.ClientAddr = "1.2.3.4\r\n" }},
		{"long address", func(r *Request) { r.ClientAddr = strings.Repeat("1", 257) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := validRequest()
			tt.mut(&r)
			if err := WriteRequest(io.Discard, r); err == nil {
				t.Fatal("WriteRequest accepted an invalid request")
			}
		})
	}
}

func blob(s string) []byte { return append(header(uint32(len(s))), s...) }

func TestReadRequestHostile(t *testing.T) {
	tests := []struct {
		name  string
		input []byte
		want  error
	}{
		{"empty stream", nil, io.EOF},
		{"partial length", []byte{0, 0}, ErrPreamble},
		{"zero length", header(0), ErrPreamble},
		{"over the limit", header(MaxRequestSize + 1), ErrPreamble},
		{"truncated", append(header(100), `{"sid":`...), ErrPreamble},
		{"not json", blob("hello"), ErrPreamble},
		{"unknown field", blob(`{"sid":"0123456789abcdef0123456789abcdef","client_addr":"a","groups":["system:masters"]}`), ErrPreamble},
		{"trailing bytes", blob(`{"sid":"0123456789abcdef0123456789abcdef","client_addr":"a"} {}`), ErrPreamble},
		{"bad session id", blob(`{"sid":"../../etc","client_addr":"a"}`), ErrPreamble},
		{"header injection in the address", blob(`{"sid":"0123456789abcdef0123456789abcdef","client_addr":"a\r\nImpersonate-User: admin"}`), ErrPreamble},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ReadRequest(bytes.NewReader(tt.input)); !errors.Is(err, tt.want) {
				t.Fatalf("error = %v, want %v", err, tt.want)
			}
		})
	}
}

func FuzzReadRequest(f *testing.F) {
	var buf bytes.Buffer
	_ = WriteRequest(&buf, validRequest())
	f.Add(buf.Bytes())
	f.Add(blob(`{"sid":"x"}`))
	f.Add(header(0xffffffff))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		got, err := ReadRequest(r)
		if err != nil {
			return
		}
		if got.Validate() != nil {
			t.Fatalf("accepted an invalid request %+v", got)
		}
		// Exactly the request's bytes were consumed, and it re-encodes.
		var out bytes.Buffer
		if err := WriteRequest(&out, got); err != nil {
			t.Fatalf("accepted request does not re-encode: %v", err)
		}
		if consumed := len(in) - r.Len(); consumed < 4 || consumed > 4+MaxRequestSize {
			t.Fatalf("consumed %d bytes", consumed)
		}
	})
}
