package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/test/cluster/clustertest"
)

// The WebSocket rules of the worker, against the real API server through
// the hops, with a client written by hand so that it can offer what
// kubectl never does (base64 only, compression) and send a frame no
// library would.

// wsExec opens exec of argv in pod (container of the same name) over
// WebSocket through the hops, offering protocols and extensions, and
// returns the connection, its reader after the response head, and the
// response (its body read when it is not a 101).
func wsExec(t *testing.T, h *hops, ns, pod, protocols, extensions string, stdin bool, argv ...string) (net.Conn, *bufio.Reader, *http.Response, string) {
	t.Helper()
	base, err := url.Parse(h.baseURL)
	if err != nil {
		t.Fatal(err)
	}
	q := url.Values{"command": argv, "container": {pod}, "stdout": {"true"}, "stderr": {"true"}}
	if stdin {
		q.Set("stdin", "true")
	}
	conn, err := net.Dial("tcp", base.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	var req bytes.Buffer
	fmt.Fprintf(&req, "GET /k8s/demo/api/v1/namespaces/%s/pods/%s/exec?%s HTTP/1.1\r\nHost: %s\r\n", ns, pod, q.Encode(), base.Host)
	req.WriteString("Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n")
	if protocols != "" {
		fmt.Fprintf(&req, "Sec-WebSocket-Protocol: %s\r\n", protocols)
	}
	if extensions != "" {
		fmt.Fprintf(&req, "Sec-WebSocket-Extensions: %s\r\n", extensions)
	}
	req.WriteString("\r\n")
	if _, err := conn.Write(req.Bytes()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("exec over WebSocket: %v", err)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return conn, br, resp, ""
	}
	body, _ := io.ReadAll(resp.Body)
	return conn, br, resp, string(body)
}

// wsFrame is one frame the API server sent.
type wsFrame struct {
	hdr     ws.Header
	payload []byte
}

// readFrames reads the server's frames until the server's side ends, then
// closes the connection, as a client does.
func readFrames(t *testing.T, conn net.Conn, br *bufio.Reader) []wsFrame {
	t.Helper()
	var frames []wsFrame
	for {
		hdr, err := ws.ReadHeader(br)
		if err != nil {
			conn.Close()
			return frames
		}
		p := make([]byte, hdr.Length)
		if _, err := io.ReadFull(br, p); err != nil {
			t.Fatalf("frame cut: %v", err)
		}
		frames = append(frames, wsFrame{hdr, p})
	}
}

// channelData joins the payloads of binary frames on channel ch.
func channelData(frames []wsFrame, ch byte) string {
	var b strings.Builder
	for _, f := range frames {
		if f.hdr.OpCode == ws.OpBinary && len(f.payload) > 0 && f.payload[0] == ch {
			b.Write(f.payload[1:])
		}
	}
	return b.String()
}

// TestWebSocketOffersOnlyBinaryProtocols: a client that offers only
// base64.channel.k8s.io gets Limen's 400 naming the protocols it relays,
// and the command never runs; a client that offers base64 first, then
// v4.channel.k8s.io, gets v4 (binary) from the API server, and a stream
// the worker decodes and records.
func TestWebSocketOffersOnlyBinaryProtocols(t *testing.T) {
	h := newHops(t)
	h.recordStreams(t)
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "b64", []string{"sleep", "infinity"}, false)

	mark := filepath.Join(t.TempDir(), "mark")
	_, _, resp, body := wsExec(t, h, ns, "b64", "base64.channel.k8s.io", "", false, "touch", mark)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "v5.channel.k8s.io") {
		t.Fatalf("base64 only: %s %s; want Limen's 400 naming the binary protocols", resp.Status, body)
	}
	assertNoMark(t, mark)

	conn, br, resp, body := wsExec(t, h, ns, "b64", "base64.channel.k8s.io, v4.channel.k8s.io", "", false, "echo", "binary-b64-first")
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Protocol") != "v4.channel.k8s.io" {
		t.Fatalf("base64 first: %s %v %s; want a 101 to v4.channel.k8s.io", resp.Status, resp.Header, body)
	}
	if out := channelData(readFrames(t, conn, br), 1); out != "binary-b64-first\n" {
		t.Fatalf("stdout %q", out)
	}
	s := storyIn(t, h.store, sessionsSince(t, h.store, sessions.KindExec, time.Now().Add(-time.Minute), "binary-b64-first")[0])
	if end := s.end(); end.EndReason != audit.EndCompleted || end.RecordingSHA256 == "" {
		t.Fatalf("session.end %+v, want a completed, recorded exec", end)
	}
}

// TestWebSocketCompressionIsStripped: a client that asks for
// permessage-deflate through Limen gets a 101 without it from the real API
// server, every frame uncompressed (RSV1 clear), and the recording holds
// the whole output it received.
func TestWebSocketCompressionIsStripped(t *testing.T) {
	h := newHops(t)
	h.recordStreams(t)
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "deflate", []string{"sleep", "infinity"}, false)
	const marker = "deflate-marker"
	conn, br, resp, body := wsExec(t, h, ns, "deflate", "v5.channel.k8s.io", "permessage-deflate; client_max_window_bits", false,
		"sh", "-c", "i=0; while [ $i -lt 2000 ]; do echo compressible-line-$i; i=$((i+1)); done", marker)
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Extensions") != "" {
		t.Fatalf("%s %v %s; want a 101 with no extension", resp.Status, resp.Header, body)
	}
	frames := readFrames(t, conn, br)
	for _, f := range frames {
		if f.hdr.Rsv != 0 {
			t.Fatalf("a frame with RSV bits %03b: compressed", f.hdr.Rsv)
		}
	}
	out := channelData(frames, 1)
	if !strings.HasSuffix(out, "compressible-line-1999\n") || strings.Count(out, "\n") != 2000 {
		t.Fatalf("stdout of %d bytes, %d lines; want 2000 lines", len(out), strings.Count(out, "\n"))
	}
	s := storyIn(t, h.store, sessionsSince(t, h.store, sessions.KindExec, time.Now().Add(-time.Minute), marker)[0])
	if end := s.end(); end.EndReason != audit.EndCompleted || end.ExitCode == nil || *end.ExitCode != 0 {
		t.Fatalf("session.end %+v, want completed with exit 0", end)
	}
	rec := spooledRecording(t, h, s.id)
	// Without a terminal, the recording holds the output as a terminal
	// showed it (each \n as \r\n); the client got the bytes as they were.
	if _, evs := castEvents(t, rec); castOutput(evs) != shownByTerminal(out) {
		t.Fatalf("the recording's output (%d bytes) is not the %d bytes the client got, as a terminal shows them", len(castOutput(evs)), len(out))
	}
}

// TestMalformedClientFrameEndsTheStream: a client that sends a frame with
// a reserved opcode through the worker's relay has its stream ended; the
// worker goes on serving, and session.end says decode_failed and why.
func TestMalformedClientFrameEndsTheStream(t *testing.T) {
	h := newHops(t)
	h.recordStreams(t)
	ns := clustertest.Namespace(t)
	clustertest.RunPod(t, ns, "malformed", []string{"sleep", "infinity"}, false)
	const marker = "malformed-marker"
	conn, br, resp, body := wsExec(t, h, ns, "malformed", "v5.channel.k8s.io", "", true, "sh", "-c", "cat; sleep 60", marker)
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("%s %s", resp.Status, body)
	}
	// A masked, final frame with the reserved opcode 0x3 and no payload.
	if _, err := conn.Write([]byte{0x83, 0x80, 1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	// The client is told and the stream ends, although this client keeps
	// its connection open.
	if b, err := io.ReadAll(br); err != nil || !bytes.Contains(b, []byte("could not decode")) {
		t.Fatalf("the client read %q (%v); want Limen's failure status, then the end", b, err)
	}
	s := storyIn(t, h.store, sessionsSince(t, h.store, sessions.KindExec, time.Now().Add(-time.Minute), marker)[0])
	if end := s.end(); end.EndReason != audit.EndDecodeFailed || !strings.Contains(end.EndDetail, "reserved opcode") {
		t.Fatalf("session.end %+v, want decode_failed naming the reserved opcode", end)
	}
	if code, body := h.get(t, listPath); code != http.StatusOK {
		t.Fatalf("the worker after the malformed frame: %d %s", code, body)
	}
}

// spooledRecording is the recording of session id in the hops worker's
// spool, once committed.
func spooledRecording(t *testing.T, h *hops, id string) []byte {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		f, err := h.worker.Spool.Open(id)
		if err == nil {
			defer f.Close()
			b, err := io.ReadAll(f)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recording of session %s: %v", id, err)
		}
	}
}
