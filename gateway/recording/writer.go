// Package recording writes, stores and plays interactive Kubernetes sessions
// as asciicast v3 (https://docs.asciinema.org/manual/asciicast/v3/).
//
// A Writer is a stream.Handler: fed by the stream decoders, it records
// stdout and stderr as "o" events, resizes as "r" and the exit status as "x".
// Stdin is never recorded. A Spool keeps finished recordings on the worker's
// disk until their upload is acknowledged.
package recording

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"
	"sync"
	"time"

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
)

// Meta describes the recorded session; it goes into the header.
type Meta struct {
	Cluster, Namespace, Pod, Container string
	User, Session                      string
	// Command is the command line (exec) or empty (attach).
	Command string
	// Start is when the session started; the zero time means the Writer's creation.
	Start time.Time
}

// Writer records one session as asciicast v3. It is safe for concurrent use by
// both directions' decoders. The first write error is returned from that call
// and every later one: the relay must end the stream then.
type Writer struct {
	stream.NopHandler // stdin, port-forward and close events are not recorded

	mu       sync.Mutex
	w        io.Writer
	sum      hash.Hash
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
}

// NewWriter returns a Writer that writes the recording to w.
func NewWriter(w io.Writer, meta Meta) *Writer {
	return newWriter(w, meta, time.Now)
}

func newWriter(w io.Writer, meta Meta, now func() time.Time) *Writer {
	start := meta.Start
	if start.IsZero() {
		start = now()
	}
	return &Writer{w: w, sum: sha256.New(), meta: meta, now: now, start: start}
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
	if text := buf.take(p); len(text) > 0 {
		return wr.event("o", text)
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
	return wr.event("r", fmt.Appendf(nil, "%dx%d", ts.Width, ts.Height))
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
	wr.exited = true
	return wr.event("x", strconv.AppendInt(nil, int64(st.Code), 10))
}

// Finish flushes held bytes and writes the header if nothing was recorded.
// It does not close the underlying writer. Later events are errors.
func (wr *Writer) Finish() error {
	wr.mu.Lock()
	defer wr.mu.Unlock()
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

// SHA256 returns the hex SHA-256 of everything written so far.
func (wr *Writer) SHA256() string {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	return hex.EncodeToString(wr.sum.Sum(nil))
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

func (wr *Writer) flushHeld() error {
	for _, b := range []*utf8Buffer{&wr.stdout, &wr.stderr} {
		if text := b.flush(); len(text) > 0 {
			if err := wr.event("o", text); err != nil {
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
		},
	}
	b, err := json.Marshal(h)
	if err != nil {
		return wr.fail(fmt.Errorf("recording header: %w", err))
	}
	wr.header = true
	return wr.writeLine(append(b, '\n'))
}

// event writes [interval, code, data]. Intervals are differences of rounded
// absolute times, so rounding never accumulates into drift.
func (wr *Writer) event(code string, data []byte) error {
	if !wr.header {
		if err := wr.writeHeader(DefaultCols, DefaultRows); err != nil {
			return err
		}
	}
	ms := wr.now().Sub(wr.start).Round(time.Millisecond).Milliseconds()
	if ms < wr.lastMs {
		ms = wr.lastMs // a clock step backwards must not make a negative interval
	}
	interval := ms - wr.lastMs
	wr.lastMs = ms
	wr.line = fmt.Appendf(wr.line[:0], "[%d.%03d, %q, ", interval/1000, interval%1000, code)
	wr.line = append(appendJSONString(wr.line, data), "]\n"...)
	return wr.writeLine(wr.line)
}

func (wr *Writer) writeLine(b []byte) error {
	if _, err := wr.w.Write(b); err != nil {
		return wr.fail(fmt.Errorf("write recording: %w", err))
	}
	wr.sum.Write(b)
	return nil
}

func (wr *Writer) fail(err error) error {
	wr.err = err
	return err
}
