package ws_test

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/limenhq/limen/gateway/stream"
	"github.com/limenhq/limen/gateway/stream/internal/capture"
	"github.com/limenhq/limen/gateway/stream/spdy"
	"github.com/limenhq/limen/gateway/stream/ws"
)

var update = flag.Bool("update", false, "re-capture the golden sessions with the real client and server libraries")

// goldens are real sessions: client-go's clients against the kubelet's (or
// the API server's) handlers, recorded on loopback.
var goldens = []struct {
	name    string
	capture func(context.Context) (capture.Session, error)
	want    []string // lines the decoded log must contain
}{
	{"exec-v4", func(ctx context.Context) (capture.Session, error) {
		return capture.Exec(ctx, capture.WebSocketV4, false)
	},
		[]string{`stdout "hello from stdout\ncafé\n"`, `stderr "warning on stderr\n"`, fmt.Sprintf("stdin %d", len(capture.StdinText)), "exit 3 NonZeroExitCode"}},
	{"exec-v4-tty", func(ctx context.Context) (capture.Session, error) {
		return capture.Exec(ctx, capture.WebSocketV4, true)
	},
		[]string{"resize 100x40", `stdout "size 100x40\r\nhello from stdout\ncafé\n"`, "exit 0"}},
	{"exec-v5", func(ctx context.Context) (capture.Session, error) {
		return capture.Exec(ctx, capture.WebSocketV5, false)
	},
		[]string{`stderr "warning on stderr\n"`, "exit 3 NonZeroExitCode", "close-channel client→server 0"}},
	{"exec-v5-tty", func(ctx context.Context) (capture.Session, error) {
		return capture.Exec(ctx, capture.WebSocketV5, true)
	},
		[]string{"resize 100x40", "exit 0"}},
	{"portforward-tunnel", func(ctx context.Context) (capture.Session, error) { return capture.PortForward(ctx, true) },
		[]string{fmt.Sprintf("port-data 8080 client→server %d", capture.PayloadSize), fmt.Sprintf("port-data 8080 server→client %d", capture.PayloadSize), "port-error 9999"}},
}

// pair is both directions' decoders for one connection.
type pair struct {
	client, server interface {
		Write([]byte) (int, error)
		Close() error
	}
	closers []func() error
}

func newPair(t testing.TB, proto string, h stream.Handler) *pair {
	mode, err := ws.ModeFor(proto)
	if err != nil {
		t.Fatal(err)
	}
	cfgC := ws.Config{Mode: mode, Direction: stream.ClientToServer, Handler: h}
	cfgS := ws.Config{Mode: mode, Direction: stream.ServerToClient, Handler: h}
	p := &pair{}
	if mode == ws.ModeSPDYTunnel {
		sess, err := spdy.NewSession(spdy.ProtocolPortForward, h, spdy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		cfgC.Tunnel, cfgS.Tunnel = sess.Client(), sess.Server()
		p.closers = append(p.closers, sess.Client().Close, sess.Server().Close)
	}
	c, err := ws.NewDecoder(cfgC)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ws.NewDecoder(cfgS)
	if err != nil {
		t.Fatal(err)
	}
	p.client, p.server = c, s
	p.closers = append([]func() error{c.Close, s.Close}, p.closers...)
	return p
}

// decode feeds the client bytes then the server bytes, each split into the
// given chunks, and returns the event log.
func decode(t testing.TB, g capture.Session, clientCuts, serverCuts []int) (string, error) {
	log := &capture.Log{}
	p := newPair(t, g.Protocol, log)
	if err := capture.Feed(p.client, g.Client, clientCuts); err != nil {
		return log.String(), err
	}
	if err := capture.Feed(p.server, g.Server, serverCuts); err != nil {
		return log.String(), err
	}
	for _, c := range p.closers {
		if err := c(); err != nil {
			return log.String(), err
		}
	}
	return log.String(), nil
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
