package tunnel_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"

	"github.com/limenhq/limen/gateway/tunnel"
)

// The proxy side: the TLS listener hands limen-tunnel/1 connections to
// ServeConn; the HTTP handler opens one stream per request.
func ExampleServer() {
	srv := &tunnel.Server{
		Logger: slog.Default(),
		OnConnect: func(ctx context.Context, w *tunnel.Worker) error {
			// Request, not Send: the worker's reply proves it applied the
			// list before Open can choose it.
			m, err := tunnel.NewMessage("lock.list", []string{"mallory"})
			if err != nil {
				return err
			}
			_, err = w.Request(ctx, m)
			return err
		},
		OnMessage: func(ctx context.Context, w *tunnel.Worker, m tunnel.Message) {
			slog.Info("from worker", "worker", w.Info().WorkerID, "type", m.Type)
		},
	}
	// In the listener, after verifying the client certificate:
	serve := func(ctx context.Context, conn *tls.Conn) {
		if conn.ConnectionState().NegotiatedProtocol != tunnel.ALPN {
			return // an HTTP connection
		}
		cluster := clusterOf(conn.ConnectionState().PeerCertificates[0])
		_ = srv.ServeConn(ctx, conn, cluster) // blocks for the session's life
	}
	_ = serve
	// In the /k8s/<cluster>/ handler:
	proxyRequest := func(ctx context.Context, cluster string, req *http.Request) (*http.Response, error) {
		stream, err := srv.Open(ctx, cluster)
		if errors.Is(err, tunnel.ErrNoWorker) {
			return nil, err // 503
		} else if err != nil {
			return nil, err
		}
		// write the grant preamble, then HTTP/1.1
		if err := req.Write(stream); err != nil {
			stream.Close()
			return nil, err
		}
		return http.ReadResponse(bufio.NewReader(stream), req)
	}
	_ = proxyRequest
	// A lock pushed to every worker of every cluster:
	lock, _ := tunnel.NewMessage("lock.set", map[string]string{"user": "bob"})
	_ = srv.Broadcast(context.Background(), "", lock)
}

// The worker side: Run keeps the tunnel up; every stream is one request.
func ExampleClient() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var c *tunnel.Client
	c = &tunnel.Client{
		Addr:      "proxy.example.com:443",
		TLSConfig: &tls.Config{ /* enrollment certificate, proxy roots */ },
		Hello:     tunnel.Hello{Cluster: "prod", WorkerID: "worker-1", Version: "v0.1.0"},
		Logger:    slog.Default(),
		Handler: func(ctx context.Context, stream net.Conn) {
			// read the grant, then serve HTTP/1.1 on stream; ctx ends if
			// the tunnel drops.
		},
		OnMessage: func(ctx context.Context, m tunnel.Message) {
			if m.Type == "lock.list" {
				// apply, then acknowledge
				r, _ := m.Reply("lock.ack", nil)
				_ = c.Send(ctx, r)
			}
		},
	}
	_ = c.Run(ctx) // returns when ctx ends
}

func clusterOf(*x509.Certificate) string { return "prod" }
