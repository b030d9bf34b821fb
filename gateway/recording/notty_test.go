package recording

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/stream"
)

// write is one output write of a session: to stdout, or to stderr.
type write struct {
	stderr bool
	data   string
}

// TestNonTTYOutputReadsAsATerminalShowedIt: without a terminal, each line
// feed of the output is recorded as "\r\n", once: never after a "\r" that
// is already there, in the same write or at the end of the stream's
// previous one. With a terminal, output is recorded as it is.
func TestNonTTYOutputReadsAsATerminalShowedIt(t *testing.T) {
	tests := []struct {
		name   string
		writes []write
		want   string
	}{
		{"bare line feeds", []write{{data: "one\ntwo\n"}}, "one\r\ntwo\r\n"},
		{"empty lines", []write{{data: "\n\n"}}, "\r\n\r\n"},
		{"a line feed first", []write{{data: "\nx"}}, "\r\nx"},
		{"no line feed", []write{{data: "progress 10%\rprogress 20%"}}, "progress 10%\rprogress 20%"},
		{"\\r\\n kept", []write{{data: "dos\r\nline\r\n"}}, "dos\r\nline\r\n"},
		{"\\r\\r\\n kept", []write{{data: "a\r\r\n"}}, "a\r\r\n"},
		{"mixed", []write{{data: "a\r\nb\nc\r\n\n"}}, "a\r\nb\r\nc\r\n\r\n"},
		{"\\r at the end of a write", []write{{data: "dos\r"}, {data: "\nnext"}}, "dos\r\nnext"},
		{"\\r at the end, then text", []write{{data: "x\r"}, {data: "y\n"}}, "x\ry\r\n"},
		{"\\r alone in a write", []write{{data: "a"}, {data: "\r"}, {data: "\n"}}, "a\r\n"},
		{"\\n alone in writes", []write{{data: "\n"}, {data: "\n"}}, "\r\n\r\n"},
		{"a \\r before a held byte", []write{{data: "x\r\xc3"}, {data: "\xa9\n"}}, "x\ré\r\n"},
		{"a character split across writes", []write{{data: "caf\xc3"}, {data: "\xa9\n"}}, "café\r\n"},
		{"stderr too", []write{{stderr: true, data: "warning\n"}}, "warning\r\n"},
		// stdout's "\r" is not stderr's: each stream is its own.
		{"streams apart", []write{{data: "out\r"}, {stderr: true, data: "\nerr\n"}, {data: "\n"}}, "out\r\r\nerr\r\n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			m := meta()
			m.TTY = false
			w := newWriter(&buf, m, func() time.Time { return t0 }, DefaultMaxBytes)
			for i, wr := range tt.writes {
				write := w.Stdout
				if wr.stderr {
					write = w.Stderr
				}
				if err := write([]byte(wr.data)); err != nil {
					t.Fatalf("write %d: %v", i, err)
				}
			}
			if err := w.Finish(); err != nil {
				t.Fatal(err)
			}
			if got := output(t, buf.Bytes()); got != tt.want {
				t.Fatalf("recorded %q, want %q", got, tt.want)
			}
		})
	}
}

func TestTTYOutputIsRecordedAsItIs(t *testing.T) {
	var buf bytes.Buffer
	w := newWriter(&buf, meta(), func() time.Time { return t0 }, DefaultMaxBytes)
	for _, p := range []string{"one\ntwo\r\n", "\r", "\n"} {
		if err := w.Stdout([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	if got := output(t, buf.Bytes()); got != "one\ntwo\r\n\r\n" {
		t.Fatalf("recorded %q", got)
	}
}

// TestHeaderSaysWhetherThereWasATerminal: asciicast v3 has no field for a
// session without a terminal; Limen's env entry says it.
func TestHeaderSaysWhetherThereWasATerminal(t *testing.T) {
	for _, tty := range []bool{true, false} {
		var buf bytes.Buffer
		m := meta()
		m.TTY = tty
		w := newWriter(&buf, m, func() time.Time { return t0 }, DefaultMaxBytes)
		if err := w.Resize(stream.TermSize{Width: 100, Height: 30}); err != nil {
			t.Fatal(err)
		}
		if err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		rd, err := NewReader(&buf)
		if err != nil {
			t.Fatal(err)
		}
		want := map[bool]string{true: "true", false: "false"}[tty]
		if got := rd.Header.Env[EnvTTY]; got != want {
			t.Errorf("TTY %v: header env %s = %q, want %q", tty, EnvTTY, got, want)
		}
		if rd.Header.Term.Type != "" {
			t.Errorf("TTY %v: header term.type %q: Limen does not know the user's terminal type", tty, rd.Header.Term.Type)
		}
	}
}

// onlcrRef is the reference conversion, on a whole stream at once.
func onlcrRef(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' && (i == 0 || s[i-1] != '\r') {
			b.WriteByte('\r')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// FuzzWriterNonTTY writes arbitrary output in arbitrary chunks without a
// terminal: the recording is the reference conversion of the whole stream,
// wherever the chunks split it (a "\r\n" or a UTF-8 sequence included).
func FuzzWriterNonTTY(f *testing.F) {
	f.Add([]byte("a\r\nb\nc\r"), []byte{1, 0, 2})
	f.Add([]byte("\r\n\n\r\r\n\xc3\xa9\n\xff\n"), []byte{0})
	f.Fuzz(func(t *testing.T, data, sizes []byte) {
		var buf bytes.Buffer
		m := meta()
		m.TTY = false
		w := newWriter(&buf, m, func() time.Time { return t0 }, DefaultMaxBytes)
		rest := data
		for i := 0; len(rest) > 0; i++ {
			n := len(rest)
			if len(sizes) > 0 {
				n = min(n, int(sizes[i%len(sizes)])+1)
			}
			if err := w.Stdout(rest[:n]); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
		}
		if err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		if got, want := output(t, buf.Bytes()), onlcrRef(replaceInvalid(data)); got != want {
			t.Fatalf("output %q, want %q", got, want)
		}
	})
}
