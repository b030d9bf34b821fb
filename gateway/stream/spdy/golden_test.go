package spdy_test

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/limenhq/limen/gateway/stream"
	"github.com/limenhq/limen/gateway/stream/internal/capture"
	"github.com/limenhq/limen/gateway/stream/spdy"
)

var update = flag.Bool("update", false, "re-capture the golden sessions with the real client and server libraries")

// goldens are real sessions: client-go's SPDY executor and dialer against the
// kubelet's handlers, recorded on loopback.
var goldens = []struct {
	name    string
	capture func(context.Context) (capture.Session, error)
	want    []string // lines the decoded log must contain
}{
	{"exec", func(ctx context.Context) (capture.Session, error) { return capture.Exec(ctx, capture.SPDY, false) },
		[]string{`stdout "hello from stdout\ncafé\n"`, `stderr "warning on stderr\n"`, fmt.Sprintf("stdin %d", len(capture.StdinText)), "exit 3 NonZeroExitCode"}},
	{"exec-tty", func(ctx context.Context) (capture.Session, error) { return capture.Exec(ctx, capture.SPDY, true) },
		[]string{"resize 100x40", `stdout "size 100x40\r\nhello from stdout\ncafé\n"`, "exit 0"}},
	{"portforward", func(ctx context.Context) (capture.Session, error) { return capture.PortForward(ctx, false) },
		[]string{fmt.Sprintf("port-data 8080 client→server %d", capture.PayloadSize), fmt.Sprintf("port-data 8080 server→client %d", capture.PayloadSize), "port-error 9999"}},
}

// decode feeds the client bytes then the server bytes (the client announces
// every stream), each cut at the given offsets, and returns the event log.
func decode(t testing.TB, g capture.Session, clientCuts, serverCuts []int) (string, error) {
	log := &capture.Log{}
	s, err := spdy.NewSession(g.Protocol, log, spdy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := capture.Feed(s.Client(), g.Client, clientCuts); err != nil {
		return log.String(), err
	}
	if err := capture.Feed(s.Server(), g.Server, serverCuts); err != nil {
		return log.String(), err
	}
	if err := s.Client().Close(); err != nil {
		return log.String(), err
	}
	return log.String(), s.Server().Close()
}

func TestGolden(t *testing.T) {
	for _, tc := range goldens {
		t.Run(tc.name, func(t *testing.T) {
			capt := tc.capture
			if !*update {
				capt = nil
			}
			g := capture.Golden(t, tc.name, capt)
			got, err := decode(t, g, nil, nil)
			if err != nil {
				t.Fatalf("decode: %v\nlog so far:\n%s", err, got)
			}
			capture.CheckEvents(t, tc.name, got, *update)
			for _, line := range tc.want {
				if !strings.Contains(got, line) {
					t.Errorf("events lack %q:\n%s", line, got)
				}
			}
			if strings.Contains(got, strings.TrimSpace(capture.StdinText)) {
				t.Errorf("stdin content leaked into events:\n%s", got)
			}
		})
	}
}

// TestGoldenEverySplit cuts each direction at every byte offset (and feeds it
// one byte at a time): the events must not depend on how reads were split.
func TestGoldenEverySplit(t *testing.T) {
	for _, tc := range goldens {
		t.Run(tc.name, func(t *testing.T) {
			g := capture.Golden(t, tc.name, nil)
			capture.EverySplit(t, g, func(c, s []int) (string, error) { return decode(t, g, c, s) })
		})
	}
}

var _ stream.Handler = (*capture.Log)(nil)

// TestConcurrentDirections decodes both directions of each golden session on
// two goroutines, as the relay does, with one Handler; run with -race. Which
// server data is seen depends on scheduling, but nothing may fail.
func TestConcurrentDirections(t *testing.T) {
	for _, tc := range goldens {
		g := capture.Golden(t, tc.name, nil)
		s, err := spdy.NewSession(g.Protocol, &capture.Log{}, spdy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 2)
		for _, side := range []struct {
			d    *spdy.Decoder
			data []byte
		}{{s.Client(), g.Client}, {s.Server(), g.Server}} {
			go func() {
				err := capture.Feed(side.d, side.data, capture.Bytewise(len(side.data))[:len(side.data)/2])
				if err == nil {
					err = side.d.Close()
				}
				errs <- err
			}()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
		}
	}
}
