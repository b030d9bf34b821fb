package ws_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
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

type golden struct {
	proto          string
	client, server []byte
}

func loadGolden(t *testing.T, name string, capt func(context.Context) (capture.Session, error)) golden {
	t.Helper()
	base := filepath.Join("testdata", name)
	if *update && capt != nil {
		s, err := capt(context.Background())
		if err != nil {
			t.Fatalf("capture %s: %v", name, err)
		}
		for ext, b := range map[string][]byte{".proto": []byte(s.Protocol + "\n"), ".client": s.Client, ".server": s.Server} {
			if err := os.WriteFile(base+ext, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	var g golden
	for ext, dst := range map[string]*[]byte{".client": &g.client, ".server": &g.server} {
		b, err := os.ReadFile(base + ext)
		if err != nil {
			t.Fatalf("%v (run go test -run TestGolden -update)", err)
		}
		*dst = b
	}
	p, err := os.ReadFile(base + ".proto")
	if err != nil {
		t.Fatal(err)
	}
	g.proto = strings.TrimSpace(string(p))
	return g
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
func decode(t testing.TB, g golden, clientCuts, serverCuts []int) (string, error) {
	log := &capture.Log{}
	p := newPair(t, g.proto, log)
	if err := feed(p.client, g.client, clientCuts); err != nil {
		return log.String(), err
	}
	if err := feed(p.server, g.server, serverCuts); err != nil {
		return log.String(), err
	}
	for _, c := range p.closers {
		if err := c(); err != nil {
			return log.String(), err
		}
	}
	return log.String(), nil
}

func feed(w interface{ Write([]byte) (int, error) }, b []byte, cuts []int) error {
	prev := 0
	for _, c := range append(cuts, len(b)) {
		if _, err := w.Write(b[prev:c]); err != nil {
			return err
		}
		prev = c
	}
	return nil
}

func TestGolden(t *testing.T) {
	for _, tc := range goldens {
		t.Run(tc.name, func(t *testing.T) {
			g := loadGolden(t, tc.name, tc.capture)
			got, err := decode(t, g, nil, nil)
			if err != nil {
				t.Fatalf("decode: %v\nlog so far:\n%s", err, got)
			}
			events := filepath.Join("testdata", tc.name+".events")
			if *update {
				if err := os.WriteFile(events, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(events)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("events differ from %s:\ngot:\n%s\nwant:\n%s", events, got, want)
			}
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
			g := loadGolden(t, tc.name, nil)
			want, err := decode(t, g, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			for k := 1; k < len(g.client); k++ {
				if got, err := decode(t, g, []int{k}, nil); err != nil || got != want {
					t.Fatalf("client split at %d: err=%v\n%s", k, err, got)
				}
			}
			for k := 1; k < len(g.server); k++ {
				if got, err := decode(t, g, nil, []int{k}); err != nil || got != want {
					t.Fatalf("server split at %d: err=%v\n%s", k, err, got)
				}
			}
			if got, err := decode(t, g, bytewise(len(g.client)), bytewise(len(g.server))); err != nil || got != want {
				t.Fatalf("byte at a time: err=%v\n%s", err, got)
			}
		})
	}
}

func bytewise(n int) []int {
	cuts := make([]int, 0, n)
	for i := 1; i < n; i++ {
		cuts = append(cuts, i)
	}
	return cuts
}
