package recording

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzReader parses arbitrary recordings: no panic, and every event it
// returns is well formed.
func FuzzReader(f *testing.F) {
	f.Add([]byte(validHeader + `[0.5, "o", "hi"]` + "\n# c\n" + `[1, "x", "0"]`))
	f.Add([]byte(`{"version":3,"term":{"cols":1,"rows":1},"env":{"A":"b"}}` + "\n[1e3,\"r\",\"2x2\"]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rd, err := NewReader(bytes.NewReader(data))
		if err != nil {
			return
		}
		for range 10000 {
			ev, err := rd.Next()
			if err != nil {
				return
			}
			if ev.Interval < 0 || ev.Code == "" {
				t.Fatalf("malformed event accepted: %+v", ev)
			}
		}
	})
}

// FuzzWriterUTF8 writes arbitrary output in two chunks: the recording must
// parse, and its output must equal the input with each invalid byte replaced
// by U+FFFD, wherever the split falls.
func FuzzWriterUTF8(f *testing.F) {
	f.Add([]byte("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), uint8(4))
	f.Add([]byte("\xff\xe0\x80\xed\xa0\x80"), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, cut uint8) {
		k := int(cut) % (len(data) + 1)
		var buf bytes.Buffer
		w := newWriter(&buf, meta(), func() time.Time { return t0 }, DefaultMaxBytes)
		for _, chunk := range [][]byte{data[:k], data[k:]} {
			if err := w.Stdout(chunk); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		if got, want := output(t, buf.Bytes()), replaceInvalid(data); got != want {
			t.Fatalf("output %q, want %q", got, want)
		}
	})
}

func replaceInvalid(p []byte) string {
	var b strings.Builder
	for len(p) > 0 {
		r, n := utf8.DecodeRune(p)
		b.WriteRune(r)
		p = p[n:]
	}
	return b.String()
}

// FuzzWriterCap feeds arbitrary output in arbitrary chunks to a Writer with
// an arbitrary cap: the recording stays within the cap, parses, and records
// exactly the chunks it accepted (so exactly what a relay would pass on).
func FuzzWriterCap(f *testing.F) {
	f.Add([]byte("hello\x01\xf0\x9f\x98\x80 world"), []byte{3, 1, 4, 1, 5}, uint16(40))
	f.Add(bytes.Repeat([]byte("\xe2\x82"), 300), []byte{255, 7}, uint16(0))
	f.Fuzz(func(t *testing.T, data, sizes []byte, extra uint16) {
		var hb bytes.Buffer
		if err := newWriter(&hb, meta(), func() time.Time { return t0 }, DefaultMaxBytes).Finish(); err != nil {
			t.Fatal(err)
		}
		maxBytes := int64(hb.Len()) + reserve + int64(extra)
		var buf bytes.Buffer
		w := newWriter(&buf, meta(), func() time.Time { return t0 }, maxBytes)
		var accepted []byte
		cut := false
		for i := 0; len(data) > 0; i++ {
			n := len(data)
			if len(sizes) > 0 {
				n = min(n, int(sizes[i%len(sizes)])+1)
			}
			err := w.Stdout(data[:n])
			switch {
			case err == nil && !cut:
				accepted = append(accepted, data[:n]...)
			case errors.Is(err, ErrCapReached):
				cut = true
			default:
				t.Fatalf("chunk %d: %v (cut %v)", i, err, cut)
			}
			data = data[n:]
		}
		if err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		if int64(buf.Len()) > maxBytes {
			t.Fatalf("recording of %d bytes, cap %d", buf.Len(), maxBytes)
		}
		if got, want := output(t, buf.Bytes()), replaceInvalid(accepted); got != want {
			t.Fatalf("output %q, want %q", got, want)
		}
	})
}
