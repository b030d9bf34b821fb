package proxy_test

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/grant"
)

// watchWorker answers every stream with a watch: its kube.request, a
// chunked head, a first event, and then, once told, a second event and the
// body's end, or a cut inside a chunk (cut).
type watchWorker struct {
	grantKey ed25519.PublicKey
	cut      bool
	more     chan struct{}
}

func (w *watchWorker) Open(_ context.Context, cluster string) (net.Conn, error) {
	client, server := net.Pipe()
	go func() {
		defer server.Close()
		br := bufio.NewReader(server)
		tok, err := grant.ReadPreamble(br, grant.MaxTokenSize)
		if err != nil {
			return
		}
		g, err := grant.Verify(w.grantKey, tok, cluster, time.Now())
		if err != nil {
			return
		}
		preq, err := grant.ReadRequest(br)
		if err != nil {
			return
		}
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		ev := audit.Event{Type: audit.TypeKubeRequest, Time: time.Now(), Principal: g.Principal, Cluster: cluster, SessionID: preq.SessionID,
			Kube: &audit.KubeRequest{Method: "GET", Path: "/api/v1/configmaps", Status: 200}}
		if audit.WriteEvent(server, ev) != nil {
			return
		}
		_, _ = io.WriteString(server, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nKeep-Alive: timeout=5\r\n"+
			"Transfer-Encoding: chunked\r\n\r\n8\r\nevent-1\n\r\n")
		<-w.more
		if w.cut {
			_, _ = io.WriteString(server, "10\r\nevent-2") // the stream ends inside the chunk
			return
		}
		_, _ = io.WriteString(server, "8\r\nevent-2\n\r\n0\r\n\r\n")
	}()
	return client, nil
}

// TestStreamedResponseRelay: a watch's body is relayed by the proxy's own
// copy (streamed.go): each event reaches the client as the worker sends it,
// before the next; hop-by-hop headers stay behind; a clean end is a clean
// end; and a body cut short is an error for the client, never a clean end.
func TestStreamedResponseRelay(t *testing.T) {
	for _, cut := range []bool{false, true} {
		f := newFront(t)
		w := &watchWorker{grantKey: f.worker.grantKey, cut: cut, more: make(chan struct{})}
		f.kube.Tunnel = w
		resp, err := http.Get(f.url + "/k8s/demo/api/v1/configmaps?watch=true")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Keep-Alive") != "" {
			t.Fatalf("cut=%v: %s %v", cut, resp.Status, resp.Header)
		}
		br := bufio.NewReader(resp.Body)
		first, err := br.ReadString('\n') // before the worker sends more
		if err != nil || first != "event-1\n" {
			t.Fatalf("cut=%v: first event %q, %v", cut, first, err)
		}
		close(w.more)
		rest, err := io.ReadAll(br)
		resp.Body.Close()
		switch {
		case !cut && (err != nil || string(rest) != "event-2\n"):
			t.Fatalf("clean end: %q, %v; want event-2 and the end", rest, err)
		case cut && err == nil:
			t.Fatalf("a body cut inside a chunk reached the client as a clean end (%q)", rest)
		case cut && strings.Contains(string(rest), "event-2\n"):
			t.Fatalf("cut body: %q", rest)
		}
	}
}
