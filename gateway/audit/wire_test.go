package audit

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"testing"
	"testing/iotest"
)

func TestWireRoundTripLeavesResponse(t *testing.T) {
	e := kubeEvent("alice", "prod", "get", t0)
	var buf bytes.Buffer
	if err := WriteEvent(&buf, e); err != nil {
		t.Fatal(err)
	}
	buf.WriteString("HTTP/1.1 200 OK\r\n")
	r := bufio.NewReader(iotest.OneByteReader(&buf))
	got, err := ReadEvent(r, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, e) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, e)
	}
	rest, _ := io.ReadAll(r)
	if string(rest) != "HTTP/1.1 200 OK\r\n" {
		t.Fatalf("ReadEvent consumed the response: %q", rest)
	}
	if _, err := ReadEvent(r, 0); err != io.EOF {
		t.Fatalf("clean end: %v, want io.EOF", err)
	}
}

func frame(b []byte) []byte {
	out := binary.BigEndian.AppendUint32(nil, uint32(len(b)))
	return append(out, b...)
}

func TestReadEventHostile(t *testing.T) {
	good, _ := EncodeEvent(kubeEvent("alice", "prod", "get", t0))
	tests := map[string][]byte{
		"partial header":  {0, 0},
		"zero length":     {0, 0, 0, 0},
		"huge length":     {0xff, 0xff, 0xff, 0xff},
		"over cap":        binary.BigEndian.AppendUint32(nil, MaxWireSize+1),
		"truncated body":  frame(good)[:20],
		"not json":        frame([]byte("hello")),
		"json array":      frame([]byte("[]")),
		"unknown field":   frame(append(bytes.TrimSuffix(good, []byte("}")), `,"admin":true}`...)),
		"trailing bytes":  frame(append(bytes.Clone(good), ' ')),
		"two objects":     frame(append(bytes.Clone(good), good...)),
		"invalid event":   frame([]byte(`{"type":"kube.request","time":"2026-11-01T12:00:00Z","principal":{"kind":"","name":""}}`)),
		"query in path":   frame(bytes.Replace(good, []byte(`pods/web"`), []byte(`pods/web?x=1"`), 1)),
		"wrong type kind": frame([]byte(`{"type":1}`)),
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ReadEvent(bytes.NewReader(in), 0)
			if !errors.Is(err, ErrWire) {
				t.Fatalf("error = %v, want ErrWire", err)
			}
		})
	}
	if _, err := ReadEvent(bytes.NewReader(frame(good)), 10); !errors.Is(err, ErrWire) {
		t.Errorf("caller max ignored: %v", err)
	}
	broken := errors.New("reset")
	if _, err := ReadEvent(iotest.ErrReader(broken), 0); !errors.Is(err, broken) || errors.Is(err, ErrWire) {
		t.Errorf("transport error = %v", err)
	}
}

func TestWriteEventRefusesInvalid(t *testing.T) {
	e := kubeEvent("alice", "prod", "get", t0)
	e.Kube.Path = "/api?secret=1"
	var buf bytes.Buffer
	if err := WriteEvent(&buf, e); !errors.Is(err, ErrInvalid) || buf.Len() != 0 {
		t.Fatalf("WriteEvent = %v, wrote %d bytes", err, buf.Len())
	}
	big := kubeEvent("alice", "prod", "get", t0)
	big.Groups = make([]string, MaxWireSize/4)
	for i := range big.Groups {
		big.Groups[i] = "limen:g"
	}
	if err := WriteEvent(&buf, big); err == nil {
		t.Fatal("oversized event written")
	}
}

func FuzzReadEvent(f *testing.F) {
	var buf bytes.Buffer
	_ = WriteEvent(&buf, kubeEvent("alice", "prod", "get", t0))
	f.Add(buf.Bytes())
	f.Add(frame([]byte(`{"type":"auth.denied","time":"2026-11-01T12:00:00Z","principal":{"kind":"","name":""},"denied":{"hop":"proxy","action":"kube","reason":"x"}}`)))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		e, err := ReadEvent(r, 0)
		if err != nil {
			return
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("accepted an invalid event: %v", err)
		}
		// An accepted event re-encodes to something that decodes the same.
		var out bytes.Buffer
		if err := WriteEvent(&out, e); err != nil {
			t.Fatalf("accepted event does not re-encode: %v", err)
		}
		again, err := ReadEvent(&out, 0)
		if err != nil || !reflect.DeepEqual(again, e) {
			t.Fatalf("re-decode differs: %v\n%+v\n%+v", err, again, e)
		}
	})
}
