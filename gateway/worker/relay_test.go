//go:build linux

package worker

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/stream"
	"github.com/limenhq/limen/gateway/stream/decode"
)

// golden is a real exec session (client-go against the kubelet's handler)
// captured by gateway/stream's golden tests.
type golden struct {
	name           string
	hdr            http.Header // the 101 response's protocol headers
	client, server []byte
}

func loadGolden(t *testing.T, dir, name string, hdr http.Header) golden {
	t.Helper()
	g := golden{name: name, hdr: hdr}
	for ext, dst := range map[string]*[]byte{".client": &g.client, ".server": &g.server} {
		b, err := os.ReadFile(filepath.Join("..", "stream", dir, "testdata", name+ext))
		if err != nil {
			t.Fatal(err)
		}
		*dst = b
	}
	return g
}

func execGoldens(t *testing.T) []golden {
	return []golden{
		loadGolden(t, "ws", "exec-v5", http.Header{"Upgrade": {"websocket"}, "Sec-Websocket-Protocol": {"v5.channel.k8s.io"}}),
		loadGolden(t, "ws", "exec-v4", http.Header{"Upgrade": {"websocket"}, "Sec-Websocket-Protocol": {"v4.channel.k8s.io"}}),
		loadGolden(t, "spdy", "exec", http.Header{"Upgrade": {"SPDY/3.1"}, "X-Stream-Protocol-Version": {"v4.channel.k8s.io"}}),
	}
}

// tcpPair returns the two ends of a loopback TCP connection: real sockets,
// so half-closes and resets behave as they do between the hops.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	d, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a := <-accepted
	if a == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { d.Close(); a.Close() })
	return d.(*net.TCPConn), a.(*net.TCPConn)
}

// rig runs one session's relay between a client (the proxy's end of the
// tunnel stream) and an API server, both played by the test over TCP.
type rig struct {
	client, api *net.TCPConn
	done        chan ended
}

type ended struct {
	reason string
	err    error
	exit   *int
}

func startRig(t *testing.T, login string, hdr http.Header) *rig {
	t.Helper()
	return startRigWith(t, login, hdr, Backlog{Dir: t.TempDir()})
}

func startRigWith(t *testing.T, login string, hdr http.Header, backlog Backlog) *rig {
	t.Helper()
	return startRigCtx(t, context.Background(), login, hdr, backlog)
}

// startRigCtx is startRigWith whose relay runs under ctx, as under the
// session watchdog's context.
func startRigCtx(t *testing.T, ctx context.Context, login string, hdr http.Header, backlog Backlog) *rig {
	t.Helper()
	client, tunnelEnd := tcpPair(t)
	upEnd, api := tcpPair(t)
	h := &Handler{Logger: slog.New(slog.DiscardHandler), Now: time.Now, Backlog: backlog}
	x := &exchange{h: h, stream: tunnelEnd, br: bufio.NewReader(tunnelEnd)}
	s := &session{x: x, login: login, tap: &tap{ports: map[string]bool{}}}
	pair, err := decode.ForResponse(hdr, s.tap)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{client: client, api: api, done: make(chan ended, 1)}
	go func() {
		reason, err := s.relay(ctx, upstream{ReadWriteCloser: upEnd, conn: upEnd}, pair)
		_, exit := s.tap.summary()
		r.done <- ended{reason, err, exit}
	}()
	return r
}

func (r *rig) wait(t *testing.T) ended {
	t.Helper()
	select {
	case e := <-r.done:
		return e
	case <-time.After(30 * time.Second):
		t.Fatal("the relay did not end")
	}
	return ended{}
}

// clientView decodes what the client received, as the client's own
// decoder would, and returns the exit status it carries.
func clientView(t *testing.T, g golden, received []byte) (*stream.ExitStatus, error) {
	t.Helper()
	var h exitHandler
	pair, err := decode.ForResponse(g.hdr, &h)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pair.Client.Write(g.client); err != nil {
		t.Fatal(err)
	}
	if _, err := pair.Server.Write(received); err != nil {
		return h.exit, err
	}
	return h.exit, pair.Server.Close()
}

type exitHandler struct {
	stream.NopHandler
	exit *stream.ExitStatus
}

func (e *exitHandler) Exit(st stream.ExitStatus) error { e.exit = &st; return nil }

// boundaryBefore is the end of the last whole frame within p, and whether
// p up to there carries the exit status.
func boundaryBefore(t *testing.T, g golden, p []byte) (int, bool) {
	t.Helper()
	var h exitHandler
	pair, err := decode.ForResponse(g.hdr, &h)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pair.Client.Write(g.client); err != nil {
		t.Fatal(err)
	}
	if _, err := pair.Server.Write(p); err != nil {
		t.Fatal(err)
	}
	return len(p) - int(pair.Server.Pending()), h.exit != nil
}

// TestRelayWholeSession: the API server's bytes and its half-close reach
// the client whole, the client's last frame, sent after that (as a reply
// to a close would be), still reaches the API server, and the session
// ends completed with the exit status.
func TestRelayWholeSession(t *testing.T) {
	for _, g := range execGoldens(t) {
		t.Run(g.name, func(t *testing.T) {
			last := lastFrameStart(t, g)
			r := startRig(t, string(sessions.KindExec), g.hdr)
			if _, err := r.client.Write(g.client[:last]); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(r.api, make([]byte, last)); err != nil {
				t.Fatal(err)
			}
			received := make(chan []byte, 1)
			go func() { b, _ := io.ReadAll(r.client); received <- b }()
			if _, err := r.api.Write(g.server); err != nil {
				t.Fatal(err)
			}
			if err := r.api.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			if got := <-received; !bytes.Equal(got, g.server) {
				t.Fatalf("client received %d bytes, want the server's %d", len(got), len(g.server))
			}
			if _, err := r.client.Write(g.client[last:]); err != nil {
				t.Fatal(err)
			}
			if err := r.client.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			if b, err := io.ReadAll(r.api); err != nil || !bytes.Equal(b, g.client[last:]) {
				t.Fatalf("API server read %q, %v after its half-close; want the client's last frame %q", b, err, g.client[last:])
			}
			e := r.wait(t)
			if e.reason != audit.EndCompleted || e.exit == nil || *e.exit != 3 {
				t.Fatalf("ended %+v, want completed with exit code 3", e)
			}
		})
	}
}

// lastFrameStart is where the client's last frame starts.
func lastFrameStart(t *testing.T, g golden) int {
	t.Helper()
	pair, err := decode.ForResponse(g.hdr, stream.NopHandler{})
	if err != nil {
		t.Fatal(err)
	}
	last := 0
	for i := range len(g.client) - 1 {
		if _, err := pair.Client.Write(g.client[i : i+1]); err != nil {
			t.Fatal(err)
		}
		if pair.Client.Pending() == 0 {
			last = i + 1
		}
	}
	return last
}

// TestRelayClientHalfClose: the client's end reaches the API server as a
// half-close, and the API server's answer still reaches the client.
func TestRelayClientHalfClose(t *testing.T) {
	for _, g := range execGoldens(t) {
		t.Run(g.name, func(t *testing.T) {
			r := startRig(t, string(sessions.KindExec), g.hdr)
			if _, err := r.client.Write(g.client); err != nil {
				t.Fatal(err)
			}
			if err := r.client.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(r.api)
			if err != nil || !bytes.Equal(b, g.client) {
				t.Fatalf("API server read %d bytes, %v; want the client's %d and its end", len(b), err, len(g.client))
			}
			received := make(chan []byte, 1)
			go func() { b, _ := io.ReadAll(r.client); received <- b }()
			if _, err := r.api.Write(g.server); err != nil {
				t.Fatalf("API server write after the client's half-close: %v", err)
			}
			_ = r.api.CloseWrite()
			if got := <-received; !bytes.Equal(got, g.server) {
				t.Fatalf("client received %d bytes, want the server's %d", len(got), len(g.server))
			}
			if e := r.wait(t); e.reason != audit.EndCompleted {
				t.Fatalf("ended %+v, want completed", e)
			}
		})
	}
}

// TestRelayCutUpstream ends the API server's bytes at every offset, with a
// clean end and with a reset: the client must get whole frames only, and
// unless the exit status was among them, a failure status that names the
// cut — never a stream that a client could take for success.
func TestRelayCutUpstream(t *testing.T) {
	for _, g := range execGoldens(t) {
		for _, reset := range []bool{false, true} {
			name := g.name + "/eof"
			if reset {
				name = g.name + "/reset"
			}
			t.Run(name, func(t *testing.T) {
				for cut := 0; cut < len(g.server); cut++ {
					cutUpstream(t, g, cut, reset)
				}
			})
		}
	}
}

func cutUpstream(t *testing.T, g golden, cut int, reset bool) {
	t.Helper()
	r := startRig(t, string(sessions.KindExec), g.hdr)
	if _, err := r.client.Write(g.client); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(r.api, make([]byte, len(g.client))); err != nil {
		t.Fatal(err)
	}
	received := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(r.client); received <- b }()
	if _, err := r.api.Write(g.server[:cut]); err != nil {
		t.Fatal(err)
	}
	if reset {
		// Wait until the bytes were taken before resetting: a reset drops
		// what the receiver had not read, which is not what this tests.
		waitUnsent(t, r.api)
		_ = r.api.SetLinger(0)
		_ = r.api.Close()
	} else {
		_ = r.api.CloseWrite()
	}
	got := <-received
	_ = r.client.Close()
	e := r.wait(t)
	b, exited := boundaryBefore(t, g, g.server[:cut])
	if len(got) < b || !bytes.Equal(got[:b], g.server[:b]) {
		t.Fatalf("cut at %d: client received %d bytes, want the %d up to the last whole frame first", cut, len(got), b)
	}
	exit, err := clientView(t, g, got)
	if err != nil {
		t.Fatalf("cut at %d: the client's bytes do not decode to whole frames: %v", cut, err)
	}
	if exited {
		if len(got) != b || e.reason != audit.EndCompleted {
			t.Fatalf("cut at %d after the exit status: client got %d bytes (want %d), reason %q (want completed)", cut, len(got), b, e.reason)
		}
		return
	}
	if exit == nil || exit.Code == 0 || !strings.Contains(exit.Message, "Limen") {
		t.Fatalf("cut at %d: the client sees exit %+v, want a failure from Limen", cut, exit)
	}
	want := audit.EndTruncated
	if reset {
		want = audit.EndUpstreamReset
	}
	if e.reason != want {
		t.Fatalf("cut at %d: end reason %q, want %q", cut, e.reason, want)
	}
}

// TestRelayBacklogFailureFailsTheClient: when the worker cannot hold the
// output it reads ahead (its spill file cannot be created, as on a full or
// missing disk), the client gets a failure, never a silently cut stream.
func TestRelayBacklogFailureFailsTheClient(t *testing.T) {
	for _, g := range execGoldens(t) {
		t.Run(g.name, func(t *testing.T) {
			missing := filepath.Join(t.TempDir(), "missing")
			r := startRigWith(t, string(sessions.KindExec), g.hdr, Backlog{Dir: missing, Memory: 1, Max: 1 << 20})
			if _, err := r.client.Write(g.client); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(r.api, make([]byte, len(g.client))); err != nil {
				t.Fatal(err)
			}
			received := make(chan []byte, 1)
			go func() { b, _ := io.ReadAll(r.client); received <- b }()
			_, _ = r.api.Write(g.server)
			_ = r.api.CloseWrite()
			got := <-received
			_ = r.client.Close()
			e := r.wait(t)
			exit, err := clientView(t, g, got)
			if err != nil || exit == nil || exit.Code == 0 || !strings.Contains(exit.Message, "could not hold") {
				t.Fatalf("the client sees exit %+v (decode error %v), want Limen's failure", exit, err)
			}
			if e.reason != audit.EndError {
				t.Fatalf("end reason %q, want %q", e.reason, audit.EndError)
			}
		})
	}
}

// TestRelayEndedFromOutsideTellsTheClient: a stream ended from outside (the
// worker shutting down, a kill) between two frames, before the command's
// exit status, gives the client a failure status that says why, and the
// session ends with that reason.
func TestRelayEndedFromOutsideTellsTheClient(t *testing.T) {
	for _, g := range execGoldens(t) {
		t.Run(g.name, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			r := startRigCtx(t, ctx, string(sessions.KindExec), g.hdr, Backlog{Dir: t.TempDir()})
			if _, err := r.client.Write(g.client); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(r.api, make([]byte, len(g.client))); err != nil {
				t.Fatal(err)
			}
			// The server's frames up to the last whole one before the exit
			// status: the command still runs.
			cut := 0
			for i := 1; i <= len(g.server); i++ {
				if end, exited := boundaryBefore(t, g, g.server[:i]); exited {
					break
				} else {
					cut = end
				}
			}
			if _, err := r.api.Write(g.server[:cut]); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(r.client, make([]byte, cut)); err != nil {
				t.Fatalf("client read the server's first %d bytes: %v", cut, err)
			}
			cancel(&sessions.Ended{Reason: sessions.ReasonShutdown})
			rest, _ := io.ReadAll(r.client)
			e := r.wait(t)
			exit, err := clientView(t, g, append(slices.Clone(g.server[:cut]), rest...))
			if err != nil || exit == nil || exit.Code == 0 || !strings.Contains(exit.Message, "shutting down") {
				t.Fatalf("the client sees exit %+v (decode error %v) after %d bytes more, want Limen's word that it is shutting down", exit, err, len(rest))
			}
			if e.reason != audit.EndShutdown {
				t.Fatalf("end reason %q, want %q", e.reason, audit.EndShutdown)
			}
		})
	}
}

// waitUnsent waits until c's send queue is empty: the peer's kernel has
// every byte written so far.
func waitUnsent(t *testing.T, c *net.TCPConn) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for unsent(t, c) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("send queue did not drain")
		}
		time.Sleep(time.Millisecond)
	}
}

// unsent is the number of bytes in c's send queue (SIOCOUTQ).
func unsent(t *testing.T, c *net.TCPConn) int {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var ierr error
	if err := raw.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) }); err != nil {
		t.Fatal(err)
	}
	if ierr != nil {
		t.Fatal(ierr)
	}
	return n
}

// TestTapPortDataAllocatesOncePerPort: a port-forward's data frames note
// their port without allocating after the port's first frame.
func TestTapPortDataAllocatesOncePerPort(t *testing.T) {
	tp := &tap{ports: map[string]bool{}}
	if err := tp.PortData(5432, stream.ServerToClient, 32<<10); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = tp.PortData(5432, stream.ClientToServer, 32<<10) }); n != 0 {
		t.Errorf("PortData of a known port: %v allocations per frame, want 0", n)
	}
	_ = tp.PortError(8080, "refused")
	if ports, _ := tp.summary(); !slices.Equal(ports, []string{"5432", "8080"}) {
		t.Errorf("ports = %v, want [5432 8080]", ports)
	}
}

// TestRelayMalformedClientFrame: a client frame the decoder refuses (a
// reserved opcode) is not relayed; the stream ends decode_failed with the
// decoder's reason, and the API server's connection is closed.
func TestRelayMalformedClientFrame(t *testing.T) {
	hdr := http.Header{"Upgrade": {"websocket"}, "Sec-Websocket-Protocol": {"v5.channel.k8s.io"}}
	r := startRig(t, string(sessions.KindExec), hdr)
	bad := []byte{0x83, 0x80, 1, 2, 3, 4} // masked, final, opcode 0x3, no payload
	if _, err := r.client.Write(bad); err != nil {
		t.Fatal(err)
	}
	_ = r.api.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, err := io.ReadAll(r.api); len(b) != 0 || err != nil {
		t.Fatalf("the API server read %q (%v); want nothing and its connection closed", b, err)
	}
	// The client is told, and the stream ends although this client never
	// hangs up.
	_ = r.client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, err := io.ReadAll(r.client); err != nil || !bytes.Contains(b, []byte("could not decode")) {
		t.Fatalf("the client read %q (%v); want Limen's failure status and the end of the stream", b, err)
	}
	e := r.wait(t)
	if e.reason != audit.EndDecodeFailed || e.err == nil || !strings.Contains(e.err.Error(), "reserved opcode") {
		t.Fatalf("ended %+v, want decode_failed naming the reserved opcode", e)
	}
}

// halfCloser is the API server connection as TLS closes it: Close sends
// the close_notify (a half-close here) before the socket is gone, and in
// that window the API server may still answer, as the real one does with
// a normal close frame.
type halfCloser struct{ *net.TCPConn }

func (h halfCloser) Close() error { return h.CloseWrite() }

// TestRelayRefusedStreamRelaysNothingMore: once the client's frame is
// refused, what the API server still sends (its close frame, answering
// the worker's close) is not relayed: the client gets Limen's failure
// status, never a clean close it could take for success.
func TestRelayRefusedStreamRelaysNothingMore(t *testing.T) {
	hdr := http.Header{"Upgrade": {"websocket"}, "Sec-Websocket-Protocol": {"v5.channel.k8s.io"}}
	client, tunnelEnd := tcpPair(t)
	upEnd, api := tcpPair(t)
	h := &Handler{Logger: slog.New(slog.DiscardHandler), Now: time.Now, Backlog: Backlog{Dir: t.TempDir()}}
	x := &exchange{h: h, stream: tunnelEnd, br: bufio.NewReader(tunnelEnd)}
	s := &session{x: x, login: string(sessions.KindExec), tap: &tap{ports: map[string]bool{}}}
	pair, err := decode.ForResponse(hdr, s.tap)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan string, 1)
	go func() {
		reason, _ := s.relay(context.Background(), upstream{ReadWriteCloser: halfCloser{upEnd}, conn: upEnd}, pair)
		done <- reason
	}()
	// The API server answers the worker's close with a normal close frame.
	go func() {
		_, _ = io.Copy(io.Discard, api)
		_, _ = api.Write([]byte{0x88, 0x02, 0x03, 0xe8})
		_ = api.CloseWrite()
	}()
	if _, err := client.Write([]byte{0x83, 0x80, 1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, err := io.ReadAll(client); err != nil || !bytes.Contains(b, []byte("could not decode")) {
		t.Fatalf("the client read %q (%v); want Limen's failure status", b, err)
	}
	select {
	case reason := <-done:
		if reason != audit.EndDecodeFailed {
			t.Fatalf("ended %s, want decode_failed", reason)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the relay did not end")
	}
}
