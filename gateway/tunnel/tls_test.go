package tunnel

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"testing"
)

// TestClientChecksProxyTLS: the worker insists on TLS 1.3 and on the proxy
// selecting the tunnel protocol, whatever its caller's config says.
func TestClientChecksProxyTLS(t *testing.T) {
	pki := newPKI(t)
	tests := []struct {
		name    string
		server  *tls.Config
		wantErr string
	}{
		{"no ALPN selected", &tls.Config{}, "ALPN"},
		{"other ALPN only", &tls.Config{NextProtos: []string{"h2"}}, "no application protocol"},
		{"TLS 1.2 only", &tls.Config{NextProtos: []string{ALPN}, MaxVersion: tls.VersionTLS12}, "protocol version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkGoroutines(t)
			cfg := tt.server.Clone()
			cfg.Certificates = []tls.Certificate{pki.server}
			ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_ = c.(*tls.Conn).Handshake()
				_ = c.Close()
			}()
			c := newWorker(t, pki, ln.Addr().String(), "c1", "w1", echo)
			c.TLSConfig.MinVersion = tls.VersionTLS12 // the client must raise this
			c.TLSConfig.NextProtos = []string{"h2"}   // and replace this
			conn, err := c.dial(context.Background(), testTiming().withDefaults())
			if err == nil {
				_ = conn.Close()
				t.Fatal("dial succeeded")
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.wantErr)
			}
			_ = ln.Close()
			<-done
		})
	}
}

// TestServeConnChecksALPN: a connection that reached ServeConn without the
// tunnel protocol (a dispatch bug in the caller) is refused.
func TestServeConnChecksALPN(t *testing.T) {
	checkGoroutines(t)
	pki := newPKI(t)
	a, b := net.Pipe()
	server := tls.Server(a, &tls.Config{
		Certificates: []tls.Certificate{pki.server},
		NextProtos:   []string{"h2", ALPN},
	})
	client := tls.Client(b, &tls.Config{RootCAs: pki.pool, ServerName: "127.0.0.1", NextProtos: []string{"h2"}})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = client.Handshake()
		_, _ = client.Read(make([]byte, 1))
		_ = client.Close()
	}()
	var srv Server
	err := srv.ServeConn(context.Background(), server, "c1")
	if err == nil || !strings.Contains(err.Error(), "ALPN") {
		t.Fatalf("ServeConn = %v, want an ALPN refusal", err)
	}
	<-done
}
