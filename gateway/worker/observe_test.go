package worker

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/stream"
)

// pipeOpener hands the worker's end of a pipe to observe and keeps the
// proxy's end for the test; it stands in for the tunnel, which
// tunnel's own tests run for real.
type pipeOpener struct{ proxy chan net.Conn }

func (p pipeOpener) OpenStream(_ context.Context, kind string) (net.Conn, error) {
	if kind != sessions.ObserveStreamKind {
		panic("stream kind " + kind)
	}
	a, b := net.Pipe()
	p.proxy <- a
	return b, nil
}

// The live view streams a session's recording as it is written, first the
// Observe it answers, and ends once the session has ended and its
// recording is complete.
func TestObserveStreamsTheRecordingUntilTheSessionEnds(t *testing.T) {
	spool, err := recording.OpenSpool(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reg := sessions.New(sessions.Config{})
	defer reg.Close()
	live, err := reg.Register(context.Background(), sessions.Session{ID: "sess-1",
		Principal: identity.Principal{Kind: identity.KindUser, Name: "alice"}, Cluster: "demo", Kind: sessions.KindExec})
	if err != nil {
		t.Fatal(err)
	}
	f, err := spool.Create("sess-1")
	if err != nil {
		t.Fatal(err)
	}
	w := recording.NewWriter(f, recording.Meta{})
	if err := w.Stdout([]byte("before the watcher\n")); err != nil {
		t.Fatal(err)
	}
	opener := pipeOpener{proxy: make(chan net.Conn, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		observe(context.Background(), slog.Default(), opener, spool, reg, sessions.Observe{ID: "sess-1", Nonce: "n1"})
	}()
	conn := <-opener.proxy
	// A bound on every read: a broken live view fails, never hangs.
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(conn)
	head, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var o sessions.Observe
	if err := json.Unmarshal([]byte(head), &o); err != nil || o.ID != "sess-1" || o.Nonce != "n1" {
		t.Fatalf("first line %q: want the Observe answered", head)
	}
	// Output written while watched arrives too, before the session ends.
	if err := w.Stdout([]byte("while watched\n")); err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	for !strings.Contains(got.String(), "while watched") {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended before the output written while watched: %v; read %q", err, got.String())
		}
		got.WriteString(line)
	}
	if !strings.Contains(got.String(), "before the watcher") {
		t.Errorf("the output written before the watcher came is missing: %q", got.String())
	}
	select {
	case <-done:
		t.Fatal("the live view ended while the session is live")
	default:
	}
	if err := w.Exit(stream.ExitStatus{Code: 0}); err != nil {
		t.Fatal(err)
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	live.End(sessions.ReasonCompleted)
	if _, err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	rest := new(strings.Builder)
	for {
		line, err := r.ReadString('\n')
		rest.WriteString(line)
		if err != nil {
			break
		}
	}
	<-done
	if !strings.Contains(rest.String(), `"x"`) {
		t.Errorf("the stream ended without the exit status: %q", rest.String())
	}
}
