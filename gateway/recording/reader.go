package recording

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
)

// MaxLine bounds one line of a recording read back; longer is an error.
const MaxLine = 4 << 20

// Header is a parsed asciicast v3 header.
type Header struct {
	Version       int               `json:"version"`
	Term          Term              `json:"term"`
	Timestamp     int64             `json:"timestamp"`
	IdleTimeLimit float64           `json:"idle_time_limit"`
	Command       string            `json:"command"`
	Title         string            `json:"title"`
	Env           map[string]string `json:"env"`
}

// Event is one asciicast v3 event.
type Event struct {
	// Interval is the time since the previous event.
	Interval time.Duration
	// Code is "o" (output), "i" (input), "r" (resize), "m" (marker), "x" (exit)…
	Code string
	// Data is the event's data.
	Data string
}

// Reader parses an asciicast v3 recording.
type Reader struct {
	// Header is the recording's header, parsed by NewReader.
	Header Header
	br     *bufio.Reader
	line   int
}

// NewReader reads and checks the header of the recording in r.
func NewReader(r io.Reader) (*Reader, error) {
	rd := &Reader{br: bufio.NewReaderSize(r, 64<<10)}
	b, err := rd.readLine()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("asciicast: empty recording")
		}
		return nil, err
	}
	if err := json.Unmarshal(b, &rd.Header); err != nil {
		return nil, fmt.Errorf("asciicast header: %w", err)
	}
	h := rd.Header
	if h.Version != 3 {
		return nil, fmt.Errorf("asciicast header: version %d, want 3", h.Version)
	}
	if h.Term.Cols <= 0 || h.Term.Rows <= 0 || h.Term.Cols > 10000 || h.Term.Rows > 10000 {
		return nil, fmt.Errorf("asciicast header: terminal size %dx%d is out of range", h.Term.Cols, h.Term.Rows)
	}
	return rd, nil
}

// Next returns the next event, skipping comment and blank lines, or io.EOF.
func (rd *Reader) Next() (Event, error) {
	for {
		b, err := rd.readLine()
		if err != nil {
			return Event{}, err
		}
		b = bytes.TrimSpace(b)
		if len(b) == 0 || b[0] == '#' {
			continue
		}
		ev, err := parseEvent(b)
		if err != nil {
			return Event{}, fmt.Errorf("asciicast line %d: %w", rd.line, err)
		}
		return ev, nil
	}
}

func parseEvent(b []byte) (Event, error) {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return Event{}, err
	}
	if len(raw) != 3 {
		return Event{}, fmt.Errorf("event has %d elements, want 3", len(raw))
	}
	var secs float64
	var ev Event
	if err := json.Unmarshal(raw[0], &secs); err != nil {
		return Event{}, fmt.Errorf("event interval: %w", err)
	}
	if secs < 0 || math.IsNaN(secs) || secs > 1e7 {
		return Event{}, fmt.Errorf("event interval %v is out of range", secs)
	}
	ev.Interval = time.Duration(secs * float64(time.Second))
	if err := json.Unmarshal(raw[1], &ev.Code); err != nil || ev.Code == "" {
		return Event{}, fmt.Errorf("event code %s is not a non-empty string", raw[1])
	}
	if err := json.Unmarshal(raw[2], &ev.Data); err != nil {
		return Event{}, fmt.Errorf("event data: %w", err)
	}
	return ev, nil
}

// readLine returns the next line without its newline, bounded by MaxLine.
func (rd *Reader) readLine() ([]byte, error) {
	var line []byte
	for {
		chunk, err := rd.br.ReadSlice('\n')
		if len(line)+len(chunk) > MaxLine {
			return nil, fmt.Errorf("asciicast line %d is longer than %d bytes", rd.line+1, MaxLine)
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			rd.line++
			return bytes.TrimSuffix(line, []byte("\n")), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			rd.line++
			return line, nil
		default:
			return nil, err
		}
	}
}
