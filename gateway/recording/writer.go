// Package recording writes, stores and plays interactive Kubernetes sessions
// as asciicast v3 (https://docs.asciinema.org/manual/asciicast/v3/).
//
// A Writer is a stream.Handler: fed by the stream decoders, it records
// stdout and stderr as "o" events, resizes as "r" and the exit status as "x".
// Stdin is never recorded. A Spool keeps finished recordings on the worker's
// disk until their upload is acknowledged.
//
// # Output in a recording
//
// An "o" event's data is a JSON string, so it holds text: the output is
// recorded as the UTF-8 it is, with control characters escaped as JSON
// requires, and each byte that is not valid UTF-8 becomes U+FFFD, stored as
// its three UTF-8 bytes rather than the six of its escape. U+FFFD is what a
// terminal shows for such a byte and what asciinema-player draws. Played
// back (Play, Reader), valid UTF-8 output is byte for byte what the session
// printed (but for the line feeds of a session without a terminal, below),
// and binary output is what a terminal showed of it. A recording
// takes 1.0 to 1.15 times text output, and about 2.4 times random binary
// output: 27 of the 256 byte values are control characters JSON spells in
// six bytes, and the 128 values from 0x80 up seldom form UTF-8 and then take
// three.
//
// # Sessions without a terminal
//
// A command run without a tty (kubectl exec without -t) writes bare line
// feeds: no line discipline between it and kubectl turns "\n" into "\r\n"
// (onlcr); the user's own terminal does that for kubectl's output. A player
// is a terminal emulator fed the recorded bytes as they are, so it would
// move down a line without going back to the first column: a staircase.
// For such a session (Meta.TTY false) the Writer records each "\n" of the
// output as "\r\n", as the user's terminal showed it: each "\n" not
// already after a "\r", including a "\r" that ended the previous write of
// the same stream. The header says so (env LIMEN_TTY "false"). Only the
// recording changes: the bytes relayed, and the byte counts of the audit
// trail, are the session's own.
//
// # Writing to the spool, and what a crash loses
//
// The Writer hands each event to its io.Writer before the call returns, and
// the relay passes output on only after that: output is recorded before it
// reaches the user. A spool File writes each of those writes to its file
// (write(2)) before it returns, so once output is relayed the kernel holds
// its event: a worker that crashes (kill -9, a panic, the OOM killer) loses
// nothing of what it relayed, and OpenSpool recovers the recording up to its
// last complete line. A full disk (or the file size limit) fails the write
// of the event that meets it, which then is not relayed, and the File cuts
// what part of it reached the file, so the recording so far can still be
// committed; the session ends.
//
// Against a power loss (or a kernel crash), the file is synced to the disk
// (fdatasync) off the relay's path within syncEvery (500 ms) of unsynced
// output, or as soon as syncBytes (8 MiB) of it wait, and fsynced at Commit,
// the session's end. A machine that loses power may lose the output written
// since the last sync that completed: up to about 500 ms of output or 8 MiB,
// plus what was written during the sync then running. A failed sync ends
// the session like a failed write.
package recording

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/limenhq/limen/gateway/bytesize"
	"github.com/limenhq/limen/gateway/stream"
)

// Default terminal size, used when output comes before any resize (and for
// sessions without a tty).
const (
	DefaultCols = 80
	DefaultRows = 24
)

// Env keys under which the header carries Limen's metadata.
const (
	EnvCluster   = "LIMEN_CLUSTER"
	EnvNamespace = "LIMEN_NAMESPACE"
	EnvPod       = "LIMEN_POD"
	EnvContainer = "LIMEN_CONTAINER"
	EnvUser      = "LIMEN_USER"
	EnvSession   = "LIMEN_SESSION"
	// EnvTTY is "true" for a session with a terminal and "false" for one
	// without, whose line feeds the recording writes as "\r\n".
	EnvTTY = "LIMEN_TTY"
)

// Meta describes the recorded session; it goes into the header.
type Meta struct {
	Cluster, Namespace, Pod, Container string
	User, Session                      string
	// Command is the command line (exec) or empty (attach).
	Command string
	// Start is when the session started; the zero time means the Writer's creation.
	Start time.Time
	// TTY says the session has a terminal (the request's tty option).
	// Without one, output is recorded as a terminal would have shown it:
	// each line feed as "\r\n" (see the package documentation).
	TTY bool
}

// Writer records one session as asciicast v3. It is safe for concurrent use by
// both directions' decoders. The first write error is returned from that call
// and every later one: the relay must end the stream then.
//
// A Writer's recording never grows past its cap (see NewCappedWriter). The
// event that would pass it is refused with a *CapError (errors.Is
// ErrCapReached) instead of written: the recording then ends with a marker
// ("m") event saying so, stays valid asciicast, and every later event is
// refused the same way, so the relay ends the stream before relaying output
// the recording does not hold.
type Writer struct {
	stream.NopHandler // stdin, port-forward and close events are not recorded

	mu       sync.Mutex
	w        io.Writer
	meta     Meta
	now      func() time.Time
	start    time.Time
	header   bool
	lastMs   int64 // rounded absolute time of the previous event, in ms
	stdout   utf8Buffer
	stderr   utf8Buffer
	line     []byte
	exited   bool
	finished bool
	err      error

	max    int64 // the cap, in bytes of the recording
	n      int64 // bytes written so far
	capped bool  // the cap was reached and the closing marker written
}

// The recording cap's bounds, in bytes.
const (
	// DefaultMaxBytes caps a recording when nothing else is configured.
	DefaultMaxBytes int64 = 1 << 30
	// MinMaxBytes is the smallest cap accepted: room for the header, some
	// output and the closing marker.
	MinMaxBytes int64 = 64 << 10
)

// ErrCapReached means the recording reached its cap: the event was not
// recorded, so the output it carries must not be relayed. Errors of this
// kind are *CapError.
var ErrCapReached = errors.New("recording reached its size cap")

// CapError is the error of an event refused because the recording reached
// its cap.
type CapError struct {
	// Max is the cap in bytes.
	Max int64
}

func (e *CapError) Error() string {
	return fmt.Sprintf("the session's recording reached its cap of %s", FormatBytes(e.Max))
}

// Is makes errors.Is(err, ErrCapReached) hold.
func (e *CapError) Is(target error) bool { return target == ErrCapReached }

// CheckMaxBytes reports whether n can be a recording cap.
func CheckMaxBytes(n int64) error {
	if n < MinMaxBytes {
		return fmt.Errorf("a recording cap of %d bytes is below the minimum of %s", n, FormatBytes(MinMaxBytes))
	}
	return nil
}

// FormatBytes writes n for people: "1 GiB", "64 KiB", "1500 bytes"; the
// binary unit is used only when it is exact.
func FormatBytes(n int64) string { return bytesize.Format(n) }

// NewWriter returns a Writer that writes the recording to w, capped at
// DefaultMaxBytes.
func NewWriter(w io.Writer, meta Meta) *Writer {
	return newWriter(w, meta, time.Now, DefaultMaxBytes)
}

// NewCappedWriter returns a Writer that writes the recording to w and keeps
// it within maxBytes. Configuration is checked with CheckMaxBytes; a cap
// below MinMaxBytes that gets here anyway is raised to it. The header is
// always written whole: should it alone leave no room (a command line
// longer than the cap), the recording is the header and the closing marker.
func NewCappedWriter(w io.Writer, meta Meta, maxBytes int64) *Writer {
	return newWriter(w, meta, time.Now, max(maxBytes, MinMaxBytes))
}

func newWriter(w io.Writer, meta Meta, now func() time.Time, maxBytes int64) *Writer {
	start := meta.Start
	if start.IsZero() {
		start = now()
	}
	return &Writer{w: w, meta: meta, now: now, start: start, max: maxBytes}
}

// Stdout records process output.
func (wr *Writer) Stdout(p []byte) error { return wr.output(&wr.stdout, p) }

// Stderr records process error output (shown like output, as a terminal would).
func (wr *Writer) Stderr(p []byte) error { return wr.output(&wr.stderr, p) }

func (wr *Writer) output(buf *utf8Buffer, p []byte) error {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	if err := wr.usable(); err != nil {
		return err
	}
	held := *buf // a refused event leaves the held bytes as they were
	if text := buf.take(p); len(text) > 0 {
		if !wr.meta.TTY {
			text = buf.onlcr(text)
		}
		err := wr.event("o", text)
		if cap(buf.crlf) > maxKeptLine {
			buf.crlf = nil
		}
		if err != nil {
			buf.held, buf.n, buf.cr = held.held, held.n, held.cr
			return wr.refused(err)
		}
	}
	return nil
}

// Resize records a terminal size; the first one before any output sets the
// header's size.
func (wr *Writer) Resize(ts stream.TermSize) error {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	if err := wr.usable(); err != nil {
		return err
	}
	if !wr.header {
		return wr.writeHeader(int(ts.Width), int(ts.Height))
	}
	return wr.refused(wr.event("r", fmt.Appendf(nil, "%dx%d", ts.Width, ts.Height)))
}

// Exit records the exit status; output bytes held for an incomplete UTF-8
// sequence are flushed first (replaced, not dropped).
func (wr *Writer) Exit(st stream.ExitStatus) error {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	if err := wr.usable(); err != nil {
		return err
	}
	if err := wr.flushHeld(); err != nil {
		return err
	}
	if err := wr.refused(wr.event("x", strconv.AppendInt(nil, int64(st.Code), 10))); err != nil {
		return err
	}
	wr.exited = true
	return nil
}

// Finish flushes held bytes and writes the header if nothing was recorded.
// It does not close the underlying writer. Later events are errors. A
// recording cut at its cap is already complete: Finish returns nil.
func (wr *Writer) Finish() error {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	if wr.capped && !wr.finished {
		wr.finished = true
		return nil
	}
	if err := wr.usable(); err != nil {
		return err
	}
	if err := wr.flushHeld(); err != nil {
		return err
	}
	if !wr.header {
		if err := wr.writeHeader(DefaultCols, DefaultRows); err != nil {
			return err
		}
	}
	wr.finished = true
	return nil
}

// Capped reports whether the recording was cut at its cap.
func (wr *Writer) Capped() bool {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	return wr.capped
}

var errFinished = errors.New("recording: event after Finish")

func (wr *Writer) usable() error {
	if wr.err != nil {
		return wr.err
	}
	if wr.finished {
		return errFinished
	}
	return nil
}

// flushHeld records the held bytes of an incomplete UTF-8 sequence. They
// were relayed already, so they are written even into the room kept for
// them (see reserve), never refused.
func (wr *Writer) flushHeld() error {
	for _, b := range []*utf8Buffer{&wr.stdout, &wr.stderr} {
		if text := b.flush(); len(text) > 0 {
			if err := wr.ensureHeader(); err != nil {
				return err
			}
			if err := wr.writeLine(wr.eventLine("o", text)); err != nil {
				return err
			}
		}
	}
	return nil
}

// header is the asciicast v3 header line.
type header struct {
	Version   int               `json:"version"`
	Term      Term              `json:"term"`
	Timestamp int64             `json:"timestamp"`
	Command   string            `json:"command,omitempty"`
	Title     string            `json:"title,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
}

func (wr *Writer) writeHeader(cols, rows int) error {
	m := wr.meta
	h := header{
		Version:   3,
		Term:      Term{Cols: cols, Rows: rows},
		Timestamp: wr.start.Unix(),
		Command:   m.Command,
		Title:     fmt.Sprintf("%s@%s %s/%s/%s", m.User, m.Cluster, m.Namespace, m.Pod, m.Container),
		Env: map[string]string{
			EnvCluster: m.Cluster, EnvNamespace: m.Namespace, EnvPod: m.Pod,
			EnvContainer: m.Container, EnvUser: m.User, EnvSession: m.Session,
			EnvTTY: strconv.FormatBool(m.TTY),
		},
	}
	b, err := json.Marshal(h)
	if err != nil {
		return wr.fail(fmt.Errorf("recording header: %w", err))
	}
	wr.header = true
	return wr.writeLine(append(b, '\n'))
}

// ensureHeader writes the header with the default size if no resize came
// before the first event.
func (wr *Writer) ensureHeader() error {
	if wr.header {
		return nil
	}
	return wr.writeHeader(DefaultCols, DefaultRows)
}

// errNoRoom is event's answer when the line would pass the cap; the public
// methods turn it into the cut (refused).
var errNoRoom = errors.New("no room left in the recording")

// event writes [interval, code, data] if it fits within the cap, keeping
// room for what may still have to follow (reserve).
func (wr *Writer) event(code string, data []byte) error {
	if err := wr.ensureHeader(); err != nil {
		return err
	}
	ms := wr.lastMs
	line := wr.eventLine(code, data)
	// Compared so that no sum can overflow: n and max are both in
	// [0, MaxInt64], and so is the reserve.
	if int64(len(line)) > wr.max-wr.n-reserve {
		wr.lastMs = ms // nothing written: the next event's interval starts from the last written one
		return errNoRoom
	}
	return wr.writeLine(line)
}

// eventLine formats an event at the current time, in a buffer reused by
// the next call.
func (wr *Writer) eventLine(code string, data []byte) []byte {
	wr.line = appendEvent(wr.line[:0], wr.elapsed(), code, data)
	return wr.line
}

// elapsed returns the interval since the previous event in ms and makes
// now the previous event's time. Intervals are differences of rounded
// absolute times, so rounding never accumulates into drift.
func (wr *Writer) elapsed() int64 {
	ms := wr.now().Sub(wr.start).Round(time.Millisecond).Milliseconds()
	if ms < wr.lastMs {
		ms = wr.lastMs // a clock step backwards must not make a negative interval
	}
	interval := ms - wr.lastMs
	wr.lastMs = ms
	return interval
}

// appendEvent appends the line [interval, "code", "data"]; code is one
// of the plain ASCII event codes.
func appendEvent(dst []byte, interval int64, code string, data []byte) []byte {
	dst = append(strconv.AppendInt(append(dst, '['), interval/1000, 10), '.')
	ms := interval % 1000
	dst = append(dst, byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10))
	dst = append(append(append(dst, `, "`...), code...), `", `...)
	return append(appendJSONString(dst, data), "]\n"...)
}

// reserve is the room every event leaves behind it: for the held bytes of
// an incomplete UTF-8 sequence on stdout and on stderr (relayed already, so
// they must still be recordable) and for the closing marker.
var reserve = 2*int64(len(appendEvent(nil, math.MaxInt64, "o", []byte{0xff, 0xff, 0xff}))) +
	int64(len(appendEvent(nil, math.MaxInt64, "m", capMarker(math.MaxInt64))))

// capMarker is the label of the marker that ends a recording cut at its cap.
func capMarker(maxBytes int64) []byte {
	return fmt.Appendf(nil, "Limen cut the recording here: it reached its cap of %s and the session was ended", FormatBytes(maxBytes))
}

// refused turns errNoRoom into the cut: the held bytes and the closing
// marker are written, and this and every later event return a *CapError.
// Other errors pass through.
func (wr *Writer) refused(err error) error {
	if !errors.Is(err, errNoRoom) {
		return err
	}
	if err := wr.flushHeld(); err != nil {
		return err
	}
	if err := wr.writeLine(wr.eventLine("m", capMarker(wr.max))); err != nil {
		return err
	}
	wr.capped = true
	return wr.fail(&CapError{Max: wr.max})
}

// maxKeptLine bounds the line buffer a Writer keeps between events: a rare
// huge event (a 16 MiB frame) does not pin its buffer for the session.
const maxKeptLine = 1 << 20

func (wr *Writer) writeLine(b []byte) error {
	_, err := wr.w.Write(b)
	if cap(wr.line) > maxKeptLine {
		wr.line = nil
	}
	if err != nil {
		return wr.fail(fmt.Errorf("write recording: %w", err))
	}
	wr.n += int64(len(b))
	return nil
}

func (wr *Writer) fail(err error) error {
	wr.err = err
	return err
}
