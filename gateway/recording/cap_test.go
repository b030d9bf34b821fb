package recording

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/stream"
)

// fixedNow keeps every interval at zero, so line lengths are known.
func fixedNow() time.Time { return t0 }

// headerLen is the length of the header line a Writer with meta() writes.
func headerLen(t *testing.T) int64 {
	t.Helper()
	var buf bytes.Buffer
	w := newWriter(&buf, meta(), fixedNow, DefaultMaxBytes)
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	return int64(buf.Len())
}

// castOf parses a recording, failing the test if it is not valid asciicast.
func castOf(t *testing.T, b []byte) (out string, evs []Event) {
	t.Helper()
	rd, err := NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("recording does not parse: %v\n%s", err, b)
	}
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return out, evs
		}
		if err != nil {
			t.Fatalf("recording does not parse: %v\n%s", err, b)
		}
		evs = append(evs, ev)
		if ev.Code == "o" {
			out += ev.Data
		}
	}
}

// checkCut checks a recording cut at maxBytes: within the cap, valid, and
// ending with the marker that names the cap.
func checkCut(t *testing.T, b []byte, maxBytes int64) (out string) {
	t.Helper()
	if int64(len(b)) > maxBytes {
		t.Errorf("recording is %d bytes, above its cap of %d", len(b), maxBytes)
	}
	out, evs := castOf(t, b)
	if len(evs) == 0 {
		t.Fatal("cut recording has no events")
	}
	last := evs[len(evs)-1]
	if last.Code != "m" || !strings.Contains(last.Data, FormatBytes(maxBytes)) {
		t.Errorf("last event %+v, want a marker naming the cap %s", last, FormatBytes(maxBytes))
	}
	return out
}

// wantCapError checks that err is the cap's refusal for maxBytes.
func wantCapError(t *testing.T, what string, err error, maxBytes int64) {
	t.Helper()
	var ce *CapError
	if !errors.Is(err, ErrCapReached) || !errors.As(err, &ce) || ce.Max != maxBytes {
		t.Fatalf("%s: got %v, want a CapError for %d bytes", what, err, maxBytes)
	}
	if !strings.Contains(err.Error(), FormatBytes(maxBytes)) {
		t.Errorf("%s: message %q does not name the cap", what, err)
	}
}

// TestCapBoundary fills a recording to one byte below, exactly at and one
// byte above the room an event may use: only the event that fits is
// written; the one that does not is refused whole, the recording ends with
// the marker, stays within the cap and parses.
func TestCapBoundary(t *testing.T) {
	hdr := headerLen(t)
	// A line "[0.000, "o", "xxx…"]\n" is 17 bytes plus its data.
	const lineOverhead = int64(len(`[0.000, "o", ""]` + "\n"))
	const data = 1000
	room := lineOverhead + data // the room one event of `data` bytes needs
	maxBytes := hdr + room + reserve
	for _, tc := range []struct {
		name  string
		delta int // bytes added to the event
		fits  bool
	}{
		{"one byte below", -1, true},
		{"exactly at", 0, true},
		{"one byte above", +1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := newWriter(&buf, meta(), fixedNow, maxBytes)
			chunk := strings.Repeat("a", data+tc.delta)
			err := w.Stdout([]byte(chunk))
			if tc.fits {
				if err != nil {
					t.Fatalf("an event that fits was refused: %v", err)
				}
				if w.Capped() {
					t.Fatal("Capped after an event that fit")
				}
				// Whatever room is left is less than the next event needs.
				err = w.Stdout([]byte("b"))
			}
			wantCapError(t, "event past the cap", err, maxBytes)
			if !w.Capped() {
				t.Error("Capped is false after the cut")
			}
			for name, err := range map[string]error{
				"Stdout": w.Stdout([]byte("c")), "Stderr": w.Stderr([]byte("c")),
				"Resize": w.Resize(stream.TermSize{Width: 1, Height: 1}), "Exit": w.Exit(stream.ExitStatus{Code: 0}),
			} {
				wantCapError(t, name+" after the cut", err, maxBytes)
			}
			if err := w.Finish(); err != nil {
				t.Fatalf("Finish of a cut recording: %v", err)
			}
			want := ""
			if tc.fits {
				want = chunk
			}
			if out := checkCut(t, buf.Bytes(), maxBytes); out != want {
				t.Errorf("recorded output of %d bytes, want %d", len(out), len(want))
			}
		})
	}
}

// TestCapKeepsRoomForHeldBytes: output ending in an incomplete UTF-8
// sequence has been relayed, so its held bytes must still be recorded when
// the next event is refused, on stdout and stderr alike, within the cap.
func TestCapKeepsRoomForHeldBytes(t *testing.T) {
	hdr := headerLen(t)
	const lineOverhead = int64(len(`[0.000, "o", ""]` + "\n"))
	maxBytes := hdr + 2*(lineOverhead+10) + reserve
	var buf bytes.Buffer
	w := newWriter(&buf, meta(), fixedNow, maxBytes)
	// Each call records 10 bytes and holds the first 3 of a 4-byte sequence.
	if err := w.Stdout([]byte("0123456789\xf0\x9f\x98")); err != nil {
		t.Fatal(err)
	}
	if err := w.Stderr([]byte("abcdefghij\xf0\x9f\x98")); err != nil {
		t.Fatal(err)
	}
	// The rest of stdout's sequence and more: refused, so the held bytes
	// stay the three relayed ones and are recorded as such.
	wantCapError(t, "event past the cap", w.Stdout([]byte("\x80 more")), maxBytes)
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	out := checkCut(t, buf.Bytes(), maxBytes)
	if want := "0123456789abcdefghij" + strings.Repeat("\ufffd", 6); out != want {
		t.Errorf("output %q, want %q", out, want)
	}
}

// TestCapCountsEscapedBytes: the cap bounds the recording, not the output:
// control bytes take six bytes each once escaped.
func TestCapCountsEscapedBytes(t *testing.T) {
	maxBytes := headerLen(t) + reserve + 1000
	var buf bytes.Buffer
	w := newWriter(&buf, meta(), fixedNow, maxBytes)
	// 200 raw bytes, 1200 escaped.
	wantCapError(t, "escaped output past the cap", w.Stdout(bytes.Repeat([]byte{1}, 200)), maxBytes)
	if out := checkCut(t, buf.Bytes(), maxBytes); out != "" {
		t.Errorf("recorded %q of a refused event", out)
	}
}

// TestCapHostileSizes: caps below the minimum fail CheckMaxBytes and, should
// one reach a Writer anyway, are raised to the minimum; the largest int64
// neither overflows nor cuts; an event larger than the whole cap and a
// header larger than the cap end in a valid recording.
func TestCapHostileSizes(t *testing.T) {
	for _, n := range []int64{math.MinInt64, -1, 0, 1, MinMaxBytes - 1} {
		if err := CheckMaxBytes(n); err == nil {
			t.Errorf("CheckMaxBytes(%d) = nil", n)
		}
		var buf bytes.Buffer
		w := NewCappedWriter(&buf, meta(), n)
		wantCapError(t, fmt.Sprintf("cap %d, 1 MiB event", n), w.Stdout(bytes.Repeat([]byte("y"), 1<<20)), MinMaxBytes)
		if err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		checkCut(t, buf.Bytes(), MinMaxBytes)
	}
	for _, n := range []int64{MinMaxBytes, DefaultMaxBytes, math.MaxInt64} {
		if err := CheckMaxBytes(n); err != nil {
			t.Errorf("CheckMaxBytes(%d): %v", n, err)
		}
	}

	t.Run("largest cap", func(t *testing.T) {
		var buf bytes.Buffer
		w := NewCappedWriter(&buf, meta(), math.MaxInt64)
		for range 3 {
			if err := w.Stdout(bytes.Repeat([]byte("z"), 64<<10)); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Finish(); err != nil || w.Capped() {
			t.Fatalf("Finish %v, capped %v", err, w.Capped())
		}
	})

	t.Run("event larger than the cap", func(t *testing.T) {
		var buf bytes.Buffer
		w := NewCappedWriter(&buf, meta(), MinMaxBytes)
		if err := w.Stdout([]byte("before\n")); err != nil {
			t.Fatal(err)
		}
		wantCapError(t, "1 MiB event", w.Stdout(bytes.Repeat([]byte("y"), 1<<20)), MinMaxBytes)
		if err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		if out := checkCut(t, buf.Bytes(), MinMaxBytes); out != "before\n" {
			t.Errorf("output %q, want only what came before the refused event", out)
		}
	})

	t.Run("header larger than the cap", func(t *testing.T) {
		m := meta()
		m.Command = strings.Repeat("arg ", int(MinMaxBytes)/4+1)
		var buf bytes.Buffer
		w := NewCappedWriter(&buf, m, MinMaxBytes)
		wantCapError(t, "first event", w.Stdout([]byte("x")), MinMaxBytes)
		if err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		rd, err := NewReader(bytes.NewReader(buf.Bytes()))
		if err != nil || rd.Header.Command != m.Command {
			t.Fatalf("header: %v", err)
		}
		out, evs := castOf(t, buf.Bytes())
		if out != "" || len(evs) != 1 || evs[0].Code != "m" {
			t.Errorf("events %+v, want the marker alone", evs)
		}
	})
}

// TestCapUsesWriteErrorOfMarker: a write error while closing a cut
// recording is the write error, not a cap refusal: the recording failed.
func TestCapUsesWriteErrorOfMarker(t *testing.T) {
	disk := errors.New("disk full")
	w := newWriter(&failAfter{n: 1, err: disk}, meta(), fixedNow, MinMaxBytes) // header only
	err := w.Stdout(bytes.Repeat([]byte("y"), int(MinMaxBytes)))
	if !errors.Is(err, disk) || errors.Is(err, ErrCapReached) {
		t.Fatalf("got %v, want the write error", err)
	}
	if err := w.Finish(); !errors.Is(err, disk) {
		t.Errorf("Finish: %v, want the write error", err)
	}
}

// TestSpoolCommitsCutRecording: a recording cut at its cap commits like any
// other and its size is within the cap.
func TestSpoolCommitsCutRecording(t *testing.T) {
	s, err := OpenSpool(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Create("capped")
	if err != nil {
		t.Fatal(err)
	}
	w := NewCappedWriter(f, meta(), MinMaxBytes)
	var sent int
	for {
		err := w.Stdout(bytes.Repeat([]byte("line of output\n"), 100))
		if errors.Is(err, ErrCapReached) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		sent += 1500
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	item, err := f.Commit()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := s.Open("capped")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	if item.Size > MinMaxBytes || item.Size != int64(len(b)) || item.SHA256 != sha(b) {
		t.Errorf("committed %+v; cap %d, file of %d bytes with sum %s", item, MinMaxBytes, len(b), sha(b))
	}
	if out := checkCut(t, b, MinMaxBytes); len(out) != sent {
		t.Errorf("recorded %d output bytes, %d were accepted", len(out), sent)
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{
		1 << 30: "1 GiB", 64 << 10: "64 KiB", 3 << 20: "3 MiB", 1500: "1500 bytes", 0: "0 bytes", 2 << 40: "2 TiB",
		math.MaxInt64: "9223372036854775807 bytes",
	} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
