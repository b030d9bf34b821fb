package clustertest

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// Screen collects what a process prints (a pipe or a pty) so that a test
// can wait for text to appear.
type Screen struct {
	ch  chan []byte
	all bytes.Buffer
}

// NewScreen starts reading r until it ends.
func NewScreen(r io.Reader) *Screen {
	s := &Screen{ch: make(chan []byte, 1024)}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				s.ch <- bytes.Clone(buf[:n])
			}
			if err != nil {
				close(s.ch)
				return
			}
		}
	}()
	return s
}

func (s *Screen) pull(wait time.Duration) bool {
	select {
	case b, ok := <-s.ch:
		if !ok {
			return false
		}
		s.all.Write(b)
		return true
	case <-time.After(wait):
		return false
	}
}

// String is everything read so far.
func (s *Screen) String() string { return s.all.String() }

// Has reports whether text has appeared, reading what is already there.
func (s *Screen) Has(text string) bool {
	for s.pull(10 * time.Millisecond) {
	}
	return strings.Contains(s.all.String(), text)
}

// WaitFor fails the test unless text appears within 20 s.
func (s *Screen) WaitFor(t testing.TB, text string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(s.all.String(), text) {
		if time.Now().After(deadline) {
			t.Fatalf("did not see %q; output so far:\n%s", text, s.all.String())
		}
		s.pull(100 * time.Millisecond)
	}
}

// WaitForLine returns the first complete line starting with prefix,
// waiting up to 20 s for it.
func (s *Screen) WaitForLine(t testing.TB, prefix string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		lines := strings.Split(s.all.String(), "\n")
		for _, l := range lines[:len(lines)-1] { // the last may be partial
			if l = strings.TrimRight(l, "\r"); strings.HasPrefix(l, prefix) {
				return l
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no line starting %q; output so far:\n%s", prefix, s.all.String())
		}
		s.pull(100 * time.Millisecond)
	}
}

// Retype runs a shell command under a terminal again and again until its
// output shows text, or fails the test after 20 s. It is for state that
// arrives on its own schedule, such as a terminal size that kubectl sends on
// a separate stream: each attempt waits until the shell has finished the
// previous one (a numbered marker that the echoed input cannot contain), so
// it polls the observable state, never a fixed time.
func (s *Screen) Retype(t testing.TB, send func(string), command, text string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for attempt := 1; ; attempt++ {
		from := s.all.Len()
		send(fmt.Sprintf("%s; echo retype-$((%d+0))-done\n", command, attempt))
		marker := fmt.Sprintf("retype-%d-done", attempt)
		for !strings.Contains(s.all.String()[from:], marker) {
			if time.Now().After(deadline) {
				t.Fatalf("did not see %q after %d attempts of %q; output so far:\n%s", text, attempt, command, s.all.String())
			}
			s.pull(100 * time.Millisecond)
		}
		if strings.Contains(s.all.String()[from:], text) {
			return
		}
	}
}
