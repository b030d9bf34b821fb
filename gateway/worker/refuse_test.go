package worker_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/grant"
	"github.com/limenhq/limen/gateway/worker"
)

// TestStreamWithoutAGrant: a stream whose grant is missing (the preamble's
// grant is empty) is refused with a 403 and an auth.denied ahead of it,
// which names the stream's session so that the proxy stores it
// (proxy.requestEvent takes a worker's denial that names no principal);
// the API server never sees the request.
func TestStreamWithoutAGrant(t *testing.T) {
	b := newBench(t)
	sid, _ := grant.NewSessionID()
	var pre bytes.Buffer
	pre.Write([]byte{0, 0, 0, 0}) // a grant of no bytes: none
	if err := grant.WriteRequest(&pre, grant.Request{SessionID: sid, ClientAddr: "192.0.2.1:5555"}); err != nil {
		t.Fatal(err)
	}
	req := get(listPath)
	if err := req.Write(&pre); err != nil {
		t.Fatal(err)
	}
	client, server := net.Pipe()
	done := make(chan struct{})
	go func() { b.h.ServeStream(context.Background(), server); close(done) }()
	defer func() { client.Close(); <-done }()
	go func() { _, _ = client.Write(pre.Bytes()) }()
	_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(client)
	ev, err := audit.ReadEvent(br, 0)
	if err != nil {
		t.Fatalf("the worker answered a stream without a grant with no audit event: %v", err)
	}
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatalf("the worker's answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "no Limen grant") {
		t.Fatalf("%d %s, want a 403 that says the stream carries no grant", resp.StatusCode, body)
	}
	if ev.Type != audit.TypeAuthDenied || ev.SessionID != sid || ev.Denied.Hop != audit.HopWorker ||
		ev.Denied.Action != audit.ActionKube || !strings.Contains(ev.Denied.Reason, "grant: missing") {
		t.Fatalf("audit %s %+v for session %s, want the worker's auth.denied \"grant: missing\" for %s", ev.Type, ev.Denied, ev.SessionID, sid)
	}
	if err := ev.Validate(); err != nil {
		t.Fatal(err)
	}
	if n := len(b.seen()); n != 0 {
		t.Fatalf("the API server saw %d requests", n)
	}
}

// TestUndecodableUpgradeIsA502: an API server that switches to a protocol
// the worker cannot decode (base64 WebSocket, which the worker never
// offers) gets no byte of the stream relayed: the user gets a 502 that
// says why, kube.request keeps the API server's 101, and session.end says
// decode_failed and names the protocol. The API server here is a stand-in,
// named as such: the real one never answers a protocol it was not offered.
func TestUndecodableUpgradeIsA502(t *testing.T) {
	b := newBench(t)
	var err error
	if b.h.Upgrades, err = worker.UpgradeTransport(b.caFile); err != nil {
		t.Fatal(err)
	}
	b.answer = func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
			"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\nSec-WebSocket-Protocol: base64.channel.k8s.io\r\n\r\n" +
			"\x81\x05\x31AAAA") // a base64 stdout frame
		_ = brw.Flush()
		_, _ = io.Copy(io.Discard, conn)
	}
	tok, sid := b.grant(nil)
	ev, resp, body := b.serve(tok, upgrade(execPath))
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "cannot decode") || strings.Contains(body, "AAAA") {
		t.Fatalf("%d %q, want a 502 that says Limen cannot decode the protocol, and none of the stream", resp.StatusCode, body)
	}
	if ev.Type != audit.TypeKubeRequest || ev.Kube.Status != http.StatusSwitchingProtocols || ev.Kube.Subresource != "exec" {
		t.Fatalf("audit %s %+v, want kube.request with the API server's 101", ev.Type, ev.Kube)
	}
	var end *audit.Session
	for deadline := time.Now().Add(10 * time.Second); end == nil && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		for _, e := range b.stored() {
			if e.Type == audit.TypeSessionEnd && e.SessionID == sid {
				end = e.Session
			}
		}
	}
	if end == nil || end.EndReason != audit.EndDecodeFailed || !strings.Contains(end.EndDetail, "base64.channel.k8s.io") || end.RecordingSHA256 != "" {
		t.Fatalf("session.end %+v, want decode_failed naming the protocol, and no recording", end)
	}
}
