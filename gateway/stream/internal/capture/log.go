package capture

import (
	"fmt"
	"strings"
	"sync"

	"github.com/limenhq/limen/gateway/stream"
)

// Log is a stream.Handler that writes events as text lines, merging
// consecutive chunks of the same kind so that the log does not depend on how
// the bytes were split. It is safe for concurrent use.
type Log struct {
	mu    sync.Mutex
	lines []string
	key   string // kind of the last line, for merging
	text  []byte // stdout/stderr/port-error bytes of the last line
	count int    // stdin/port-data count of the last line
}

var _ stream.Handler = (*Log)(nil)

// String returns the log, one event per line.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flush()
	return strings.Join(l.lines, "\n") + "\n"
}

func (l *Log) flush() {
	switch {
	case l.key == "":
	case l.text != nil:
		l.lines = append(l.lines, fmt.Sprintf("%s %q", l.key, l.text))
	default:
		l.lines = append(l.lines, fmt.Sprintf("%s %d", l.key, l.count))
	}
	l.key, l.text, l.count = "", nil, 0
}

func (l *Log) addText(key string, p []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.key != key {
		l.flush()
		l.key, l.text = key, []byte{}
	}
	l.text = append(l.text, p...)
	return nil
}

func (l *Log) addCount(key string, n int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.key != key {
		l.flush()
		l.key = key
	}
	l.count += n
	return nil
}

func (l *Log) line(format string, args ...any) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flush()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	return nil
}

// Stdin implements stream.Handler.
func (l *Log) Stdin(n int) error { return l.addCount("stdin", n) }

// Stdout implements stream.Handler.
func (l *Log) Stdout(p []byte) error { return l.addText("stdout", p) }

// Stderr implements stream.Handler.
func (l *Log) Stderr(p []byte) error { return l.addText("stderr", p) }

// Resize implements stream.Handler.
func (l *Log) Resize(ts stream.TermSize) error { return l.line("resize %dx%d", ts.Width, ts.Height) }

// Exit implements stream.Handler.
func (l *Log) Exit(st stream.ExitStatus) error {
	return l.line("exit %d %s %q", st.Code, st.Reason, st.Message)
}

// CloseChannel implements stream.Handler.
func (l *Log) CloseChannel(dir stream.Direction, ch int) error {
	return l.line("close-channel %s %d", dir, ch)
}

// PortData implements stream.Handler.
func (l *Log) PortData(port uint16, dir stream.Direction, n int) error {
	return l.addCount(fmt.Sprintf("port-data %d %s", port, dir), n)
}

// PortError implements stream.Handler.
func (l *Log) PortError(port uint16, msg string) error {
	return l.line("port-error %d %q", port, msg)
}

// Close implements stream.Handler.
func (l *Log) Close(dir stream.Direction) error { return l.line("close %s", dir) }
