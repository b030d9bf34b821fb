package relay

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math/big"
	"net"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
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

// hop is a relay between a client and a server over loopback TCP: the test
// holds client and server, Run holds the two middle ends.
type hop struct {
	client, server *net.TCPConn
	done           chan Result
}

func startHop(t *testing.T, ctx context.Context) *hop {
	t.Helper()
	client, front := tcpPair(t)
	back, server := tcpPair(t)
	h := &hop{client: client, server: server, done: make(chan Result, 1)}
	go func() { h.done <- Run(ctx, NetConn(front, nil), NetConn(back, nil), Copy, Copy) }()
	return h
}

func (h *hop) wait(t *testing.T) Result {
	t.Helper()
	select {
	case r := <-h.done:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	return Result{}
}

func random(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// readAll reads c to its end in the background.
func readAll(c net.Conn) <-chan []byte {
	out := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(c)
		out <- b
	}()
	return out
}

func TestServerHalfCloseKeepsClientDirection(t *testing.T) {
	h := startHop(t, context.Background())
	want := random(t, 4<<20)
	got := readAll(h.client)
	if _, err := h.server.Write(want); err != nil {
		t.Fatal(err)
	}
	// The server is done sending; it still reads what the client sends.
	if err := h.server.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("client got %d bytes, want the %d the server sent", len(b), len(want))
	}
	// After the server's end reached the client, the client's bytes still
	// reach the server.
	late := random(t, 1<<20)
	fromClient := readAll(h.server)
	if _, err := h.client.Write(late); err != nil {
		t.Fatalf("client write after the server's half-close: %v", err)
	}
	if err := h.client.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if b := <-fromClient; !bytes.Equal(b, late) {
		t.Fatalf("server got %d bytes after its half-close, want %d", len(b), len(late))
	}
	r := h.wait(t)
	if r.AToB.Err != nil || r.BToA.Err != nil || r.Ended {
		t.Fatalf("result %+v, want both directions ended cleanly", r)
	}
}

func TestClientHalfCloseKeepsServerDirection(t *testing.T) {
	h := startHop(t, context.Background())
	req := []byte("the whole request")
	if _, err := h.client.Write(req); err != nil {
		t.Fatal(err)
	}
	if err := h.client.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	// The server sees the request and its end, then answers at length.
	b, err := io.ReadAll(h.server)
	if err != nil || !bytes.Equal(b, req) {
		t.Fatalf("server read %q, %v", b, err)
	}
	want := random(t, 8<<20)
	got := readAll(h.client)
	if _, err := h.server.Write(want); err != nil {
		t.Fatalf("server write after the client's half-close: %v", err)
	}
	if err := h.server.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("client got %d bytes after its half-close, want %d", len(b), len(want))
	}
	if r := h.wait(t); r.AToB.Err != nil || r.BToA.Err != nil {
		t.Fatalf("result %+v", r)
	}
}

// TestLateClientBytesDoNotResetServerDirection is the pattern behind lost
// tails: the server sends a large reply, closes its sending side, and the
// client keeps writing (pings, window updates) while the reply is still on
// its way. A relay that closed the server side at the server's end would
// leave those bytes unread there, and the reset it then sends would cut
// the reply.
func TestLateClientBytesDoNotResetServerDirection(t *testing.T) {
	h := startHop(t, context.Background())
	want := random(t, 16<<20)
	go func() {
		_, _ = h.server.Write(want)
		_ = h.server.CloseWrite()
	}()
	var got bytes.Buffer
	buf := make([]byte, 8<<10)
	for {
		n, err := h.client.Read(buf)
		got.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("client read after %d bytes: %v", got.Len(), err)
		}
		// A small client message after every read, as a ping would be.
		if _, err := h.client.Write([]byte("ping")); err != nil {
			t.Fatalf("client write after %d bytes: %v", got.Len(), err)
		}
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("client got %d bytes, want %d", got.Len(), len(want))
	}
	_ = h.client.CloseWrite()
	if r := h.wait(t); r.AToB.Err != nil || r.BToA.Err != nil {
		t.Fatalf("result %+v", r)
	}
}

func TestWriteFailureDrainsSource(t *testing.T) {
	h := startHop(t, context.Background())
	// The server goes away without reading: writes toward it fail.
	_ = h.server.SetLinger(0)
	_ = h.server.Close()
	// The client keeps sending until it sees the end the relay passes on.
	got := readAll(h.client)
	chunk := random(t, 64<<10)
	for {
		if _, err := h.client.Write(chunk); err != nil {
			t.Fatalf("the relay stopped reading the client after the server left: %v", err)
		}
		select {
		case b := <-got:
			if len(b) != 0 {
				t.Fatalf("client got %d bytes from a server that sent none", len(b))
			}
			_ = h.client.CloseWrite()
			r := h.wait(t)
			if r.BToA.Err == nil && !r.AToB.WriteFailed {
				t.Fatalf("result %+v: want the failed write or the reset reported", r)
			}
			return
		default:
		}
	}
}

func TestContextEndClosesBoth(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	h := startHop(t, ctx)
	if _, err := h.client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(h.server, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	cancel()
	r := h.wait(t)
	if !r.Ended {
		t.Fatalf("result %+v, want Ended", r)
	}
	for name, c := range map[string]net.Conn{"client": h.client, "server": h.server} {
		if _, err := io.ReadAll(c); err != nil && !errors.Is(err, io.EOF) && !isReset(err) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op)
}

// tlsPair returns the client and server ends of a TLS connection over
// loopback TCP, handshake done.
func tlsPair(t *testing.T) (*tls.Conn, *tls.Conn) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	a, b := tcpPair(t)
	client := tls.Client(a, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
	server := tls.Server(b, &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	errc := make(chan error, 1)
	go func() { errc <- server.Handshake() }()
	if err := client.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	return client, server
}

// TestCloseWriteTLS: the peer reads the end of the stream (close_notify
// and a TCP FIN), and the half-closed side still reads.
func TestCloseWriteTLS(t *testing.T) {
	client, server := tlsPair(t)
	if _, err := client.Write([]byte("last words")); err != nil {
		t.Fatal(err)
	}
	if err := CloseWrite(client); err != nil {
		t.Fatalf("CloseWrite: %v", err)
	}
	b, err := io.ReadAll(server)
	if err != nil || string(b) != "last words" {
		t.Fatalf("server read %q, %v; want the bytes and a clean end", b, err)
	}
	// The FIN reached the peer's kernel too: the raw socket reads EOF. (The
	// deadline only turns a missing FIN into a failure instead of a hang.)
	_ = server.NetConn().SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := server.NetConn().Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("raw read after close_notify: %d, %v; want the TCP FIN (EOF)", n, err)
	}
	if _, err := server.Write([]byte("reply")); err != nil {
		t.Fatal(err)
	}
	if err := server.Close(); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(client); err != nil || string(b) != "reply" {
		t.Fatalf("client read %q, %v after its half-close", b, err)
	}
}
