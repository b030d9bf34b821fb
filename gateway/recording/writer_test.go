package recording

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/stream"
)

// fakeClock advances by the given steps, one per reading.
type fakeClock struct {
	t     time.Time
	steps []time.Duration
}

func (c *fakeClock) now() time.Time {
	if len(c.steps) > 0 {
		c.t = c.t.Add(c.steps[0])
		c.steps = c.steps[1:]
	}
	return c.t
}

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// meta describes a session with a terminal, whose output is recorded byte
// for byte; nonTTY tests the other kind.
func meta() Meta {
	return Meta{Cluster: "prod", Namespace: "web", Pod: "api-0", Container: "app",
		User: "ada", Session: "s-1", Command: "sh -c date", Start: t0, TTY: true}
}

func TestWriterSession(t *testing.T) {
	clock := &fakeClock{t: t0, steps: []time.Duration{
		250 * time.Millisecond, 1 * time.Second, 1500 * time.Millisecond, 10 * time.Millisecond, 2 * time.Second}}
	var buf bytes.Buffer
	w := newWriter(&buf, meta(), clock.now, DefaultMaxBytes)
	steps := []error{
		w.Stdin(42),
		w.Resize(stream.TermSize{Width: 120, Height: 40}),
		w.Stdout([]byte("caf\xc3")), // clock reading 1: 0.25 s, nothing complete but "caf"
		w.Stdout([]byte("\xa9\r\n")),
		w.Resize(stream.TermSize{Width: 90, Height: 30}),
		w.Stderr([]byte("oops\n")),
		w.Exit(stream.ExitStatus{Code: 3}),
		w.Finish(),
	}
	for i, err := range steps {
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	want := `{"version":3,"term":{"cols":120,"rows":40},"timestamp":1795953600,"command":"sh -c date","title":"ada@prod web/api-0/app","env":{"LIMEN_CLUSTER":"prod","LIMEN_CONTAINER":"app","LIMEN_NAMESPACE":"web","LIMEN_POD":"api-0","LIMEN_SESSION":"s-1","LIMEN_TTY":"true","LIMEN_USER":"ada"}}
[0.250, "o", "caf"]
[1.000, "o", "é\r\n"]
[1.500, "r", "90x30"]
[0.010, "o", "oops\n"]
[2.000, "x", "3"]
`
	if got := buf.String(); got != want {
		t.Errorf("recording:\n%s\nwant:\n%s", got, want)
	}
	if err := w.Stdout([]byte("late")); err == nil {
		t.Error("event after Finish accepted")
	}
}

// TestIntervalsDoNotDrift: 1000 events 1.4 ms apart must add up to 1.4 s, not
// 1000 × round(1.4 ms).
func TestIntervalsDoNotDrift(t *testing.T) {
	steps := make([]time.Duration, 1000)
	for i := range steps {
		steps[i] = 1400 * time.Microsecond
	}
	var buf bytes.Buffer
	w := newWriter(&buf, meta(), (&fakeClock{t: t0, steps: steps}).now, DefaultMaxBytes)
	for range steps {
		if err := w.Stdout([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	rd, err := NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var total time.Duration
	for {
		ev, err := rd.Next()
		if err != nil {
			break
		}
		total += ev.Interval
	}
	if d := total - 1400*time.Millisecond; d < -time.Millisecond || d > time.Millisecond {
		t.Errorf("intervals add up to %v, want 1.4s ± 1ms", total)
	}
}

func TestWriterUTF8(t *testing.T) {
	tests := []struct {
		name   string
		chunks []string
		want   string // concatenated output data
	}{
		{"split 2-byte", []string{"\xc3", "\xa9"}, "é"},
		{"split 3-byte in three", []string{"\xe2", "\x82", "\xac!"}, "€!"},
		{"split 4-byte", []string{"a\xf0\x9f", "\x98\x80b"}, "a😀b"},
		{"invalid byte is replaced, not lost", []string{"a\xffb"}, "a\ufffdb"},
		{"truncated sequence flushed at exit", []string{"ok\xe2\x82"}, "ok\ufffd\ufffd"},
		{"impossible prefix is not held", []string{"\xe0\x80", "x"}, "\ufffd\ufffdx"},
		{"surrogate prefix is not held", []string{"\xed\xa0", "x"}, "\ufffd\ufffdx"},
		{"prefix cut by ASCII", []string{"\xc3", "A"}, "\ufffdA"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := newWriter(&buf, meta(), func() time.Time { return t0 }, DefaultMaxBytes)
			for _, c := range tc.chunks {
				if err := w.Stdout([]byte(c)); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Exit(stream.ExitStatus{}); err != nil {
				t.Fatal(err)
			}
			if got := output(t, buf.Bytes()); got != tc.want {
				t.Errorf("output %q, want %q", got, tc.want)
			}
		})
	}
}

// output concatenates the "o" events of a recording.
func output(t testing.TB, rec []byte) string {
	t.Helper()
	rd, err := NewReader(bytes.NewReader(rec))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for {
		ev, err := rd.Next()
		if err != nil {
			break
		}
		if ev.Code == "o" {
			out.WriteString(ev.Data)
		}
	}
	return out.String()
}

type failAfter struct {
	n   int
	err error
}

func (f *failAfter) Write(p []byte) (int, error) {
	if f.n == 0 {
		return 0, f.err
	}
	f.n--
	return len(p), nil
}

// TestWriteErrorEndsRecording: the failing call and every later one return
// the error, so the relay can end the stream before relaying the output.
func TestWriteErrorEndsRecording(t *testing.T) {
	disk := errors.New("disk full")
	w := NewWriter(&failAfter{n: 2, err: disk}, meta())
	if err := w.Stdout([]byte("one")); err != nil { // header + event
		t.Fatal(err)
	}
	if err := w.Stdout([]byte("two")); !errors.Is(err, disk) {
		t.Fatalf("got %v, want the write error", err)
	}
	if err := w.Resize(stream.TermSize{Width: 1, Height: 1}); !errors.Is(err, disk) {
		t.Errorf("after a failure got %v, want the write error again", err)
	}
	if err := w.Finish(); !errors.Is(err, disk) {
		t.Errorf("Finish after a failure: %v", err)
	}
}

func TestFinishWithoutEventsWritesHeader(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf, meta())
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	rd, err := NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if rd.Header.Term.Cols != DefaultCols || rd.Header.Env[EnvSession] != "s-1" {
		t.Errorf("header %+v", rd.Header)
	}
}
