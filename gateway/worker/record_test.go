//go:build linux

package worker

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/stream/decode"
)

// TestTTYOption reads tty as the API server's parameter conversion does.
func TestTTYOption(t *testing.T) {
	for query, want := range map[string]bool{
		"": false, "tty=true": true, "tty=1": true, "tty=": true, "tty=yes": true,
		"tty=false": false, "tty=FALSE": false, "tty=0": false,
		"tty=false&tty=true": false, "tty=true&tty=false": true, "stdin=true": false,
	} {
		q, err := url.ParseQuery(query)
		if err != nil {
			t.Fatal(err)
		}
		if got := ttyOption(q); got != want {
			t.Errorf("ttyOption(%q) = %v, want %v", query, got, want)
		}
	}
}

// TestNonTTYRecordingKeepsTheRelayExact relays real exec sessions without a
// terminal (the decoders' golden captures: output with bare line feeds,
// and a character split across frames) with a recording, as the worker
// does: the client receives exactly the API server's bytes, the session
// counts exactly those, and only the recording turns each "\n" into
// "\r\n", as the user's terminal showed it.
func TestNonTTYRecordingKeepsTheRelayExact(t *testing.T) {
	for _, g := range execGoldens(t) {
		t.Run(g.name, func(t *testing.T) {
			client, tunnelEnd := tcpPair(t)
			upEnd, api := tcpPair(t)
			h := &Handler{Logger: slog.New(slog.DiscardHandler), Now: time.Now, Backlog: Backlog{Dir: t.TempDir()}}
			x := &exchange{h: h, stream: tunnelEnd, br: bufio.NewReader(tunnelEnd)}
			var rec bytes.Buffer
			s := &session{x: x, login: string(sessions.KindExec), tap: &tap{ports: map[string]bool{}}}
			s.tap.rec = recording.NewWriter(&rec, recording.Meta{Session: "s", TTY: ttyOption(url.Values{"stdout": {"true"}})})
			pair, err := decode.ForResponse(g.hdr, s.tap)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := s.relay(context.Background(), upstream{ReadWriteCloser: upEnd, conn: upEnd}, pair)
				done <- err
			}()
			received := make(chan []byte, 1)
			go func() { b, _ := io.ReadAll(client); received <- b }()
			// The client's frames first, as in a session: SPDY's name its
			// streams, which the output's frames then refer to.
			if _, err := client.Write(g.client); err != nil {
				t.Fatal(err)
			}
			_ = client.CloseWrite()
			if b, err := io.ReadAll(api); err != nil || !bytes.Equal(b, g.client) {
				t.Fatalf("the API server read %d bytes (%v), not the client's %d", len(b), err, len(g.client))
			}
			if _, err := api.Write(g.server); err != nil {
				t.Fatal(err)
			}
			_ = api.CloseWrite()
			got := <-received
			if err := <-done; err != nil {
				t.Fatalf("relay: %v", err)
			}
			if err := s.tap.rec.Finish(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, g.server) {
				t.Fatalf("the client received %d bytes, not the API server's %d", len(got), len(g.server))
			}
			if s.out.Load() != int64(len(g.server)) || s.in.Load() != int64(len(g.client)) {
				t.Fatalf("the session counts %d bytes out and %d in; the relay carried %d and %d",
					s.out.Load(), s.in.Load(), len(g.server), len(g.client))
			}
			if !bytes.Contains(g.server, []byte("stdout\n")) {
				t.Fatal("the golden capture has no bare line feed to convert")
			}
			rd, err := recording.NewReader(&rec)
			if err != nil {
				t.Fatal(err)
			}
			if rd.Header.Env[recording.EnvTTY] != "false" {
				t.Errorf("header env %v, want %s false", rd.Header.Env, recording.EnvTTY)
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
			if want := "hello from stdout\r\ncafé\r\nwarning on stderr\r\n"; out.String() != want {
				t.Errorf("recorded %q, want %q", out.String(), want)
			}
		})
	}
}
