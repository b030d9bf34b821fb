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

// TestOffersOnlyBinaryWebSocketProtocols: the API server is offered only
// the WebSocket protocols the worker decodes, in the client's order, and
// never a compression extension; a client that offers none of them gets a
// 400 that names them, and the API server never sees its request, so no
// command runs that Limen could not record. The stand-in API server only
// records what it was offered and refuses the upgrade.
func TestOffersOnlyBinaryWebSocketProtocols(t *testing.T) {
	for _, tt := range []struct {
		name, offer string
		upstream    string // the offer the API server sees; "" refused
	}{
		{"binary", "v5.channel.k8s.io, v4.channel.k8s.io", "v5.channel.k8s.io, v4.channel.k8s.io"},
		{"base64 first", "base64.channel.k8s.io, v4.channel.k8s.io", "v4.channel.k8s.io"},
		{"versioned base64 first", "v5.base64.channel.k8s.io, v4.base64.channel.k8s.io, v4.channel.k8s.io", "v4.channel.k8s.io"},
		{"only base64", "base64.channel.k8s.io", ""},
		{"only versioned base64", "v4.base64.channel.k8s.io", ""},
		{"unversioned binary", "channel.k8s.io", ""},
		{"none", "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newBench(t)
			var offered, extensions []string
			b.answer = func(w http.ResponseWriter, r *http.Request) {
				offered, extensions = r.Header.Values("Sec-WebSocket-Protocol"), r.Header.Values("Sec-WebSocket-Extensions")
				http.Error(w, "stand-in: no upgrade", http.StatusForbidden)
			}
			req := upgrade(execPath)
			req.Header.Del("Sec-WebSocket-Protocol")
			if tt.offer != "" {
				req.Header.Set("Sec-WebSocket-Protocol", tt.offer)
			}
			req.Header.Set("Sec-WebSocket-Extensions", "permessage-deflate; client_max_window_bits")
			tok, _ := b.grant(nil)
			ev, resp, body := b.serve(tok, req)
			if tt.upstream == "" {
				if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "v5.channel.k8s.io") || ev.Kube.Status != http.StatusBadRequest {
					t.Fatalf("%d %s (audit %+v), want a 400 that names the protocols Limen relays", resp.StatusCode, body, ev.Kube)
				}
				if n := len(b.seen()); n != 0 {
					t.Fatalf("the API server saw %d requests", n)
				}
				for _, e := range b.stored() {
					t.Fatalf("a refused exec stored %s", e.Type)
				}
				return
			}
			if len(b.seen()) != 1 || strings.Join(offered, ", ") != tt.upstream || len(extensions) != 0 {
				t.Fatalf("the API server was offered %q with extensions %q; want %q and none", offered, extensions, tt.upstream)
			}
		})
	}
}
