package tunnel_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/tunnel"
)

// A proxy and a worker joined by the tunnel over loopback TLS. The proxy
// pushes a lock list when the worker connects and waits for its answer
// before the worker may serve; then it opens one stream per request, and the
// worker sends messages of its own on the control stream.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	// Certificates as enrollment gives them: the proxy's CA issues the
	// worker a certificate bound to its cluster.
	dir, _ := os.MkdirTemp("", "tunnel-example")
	defer os.RemoveAll(dir)
	authority, err := ca.Open(ca.Options{DataDir: dir, Logger: quiet})
	if err != nil {
		fmt.Println(err)
		return
	}
	key, _ := ca.NewKey()
	cert, _ := authority.IssueWorker(key.Public(), "prod")
	roots := x509.NewCertPool()
	roots.AddCert(authority.RootCert())

	// The proxy side.
	fromWorker := make(chan string, 1)
	srv := &tunnel.Server{
		Logger: quiet,
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
			fromWorker <- w.Info().Cluster + " sent " + m.Type
		},
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	serverTLS := authority.ServerTLSConfig()
	serverTLS.NextProtos = []string{tunnel.ALPN}
	go func() {
		raw, err := ln.Accept()
		if err != nil {
			return
		}
		conn := tls.Server(raw, serverTLS)
		if conn.HandshakeContext(ctx) != nil {
			return
		}
		// The cluster comes from the verified certificate, never from what
		// the worker says.
		cluster, err := authority.ClusterFromChains(conn.ConnectionState().VerifiedChains)
		if err != nil {
			return
		}
		_ = srv.ServeConn(ctx, conn, cluster) // blocks for the session's life
	}()

	// The worker side: Run keeps the tunnel up; every stream is one request.
	var c *tunnel.Client
	c = &tunnel.Client{
		Addr: ln.Addr().String(),
		TLSConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{{
			Certificate: [][]byte{cert.Raw, authority.WorkerIssuer().Raw}, PrivateKey: key}}},
		Hello:  tunnel.Hello{Cluster: "prod", WorkerID: "worker-1", Version: "v0.1.0"},
		Logger: quiet,
		Handler: func(ctx context.Context, stream net.Conn) {
			// Limen's worker reads the grant and HTTP/1.1 here.
			name, _ := bufio.NewReader(stream).ReadString('\n')
			fmt.Fprintf(stream, "hello, %s", name)
		},
		OnMessage: func(ctx context.Context, m tunnel.Message) {
			if m.Type == "lock.list" {
				// apply, then acknowledge
				r, _ := m.Reply("lock.ack", nil)
				go func() { _ = c.Send(ctx, r) }()
			}
		},
	}
	go func() { _ = c.Run(ctx) }() // returns when ctx ends

	// Open finds no worker until the lock list is acknowledged.
	for deadline := time.Now().Add(10 * time.Second); !srv.Connected("prod"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			fmt.Println("the worker did not connect")
			return
		}
	}
	stream, err := srv.Open(ctx, "prod")
	if err != nil {
		fmt.Println(err) // tunnel.ErrNoWorker: 503
		return
	}
	fmt.Fprintln(stream, "alice")
	answer, _ := io.ReadAll(stream)
	fmt.Print(string(answer))
	stream.Close()

	m, _ := tunnel.NewMessage("audit.event", map[string]int{"offset": 0})
	if err := c.Send(ctx, m); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(<-fromWorker)
	// Output:
	// hello, alice
	// prod sent audit.event
}
