package proxy_test

import (
	"crypto/tls"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/proxy"
	"github.com/limenhq/limen/gateway/proxyproto"
)

// proxyHeader is a PROXY protocol v2 header for a TCP/IPv4 client src.
func proxyHeader(src string) []byte {
	b := []byte("\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0c")
	ap := netip.MustParseAddrPort(src)
	s, d := ap.Addr().As4(), [4]byte{127, 0, 0, 1}
	b = append(append(b, s[:]...), d[:]...)
	b = binary.BigEndian.AppendUint16(b, ap.Port())
	return binary.BigEndian.AppendUint16(b, 8443)
}

// TestProxyProtocolFromTheLoadBalancer: behind a load balancer named in
// proxy-protocol-from (here loopback), each connection's client is the
// address its PROXY header names: max-conns-per-ip counts per client, not
// per balancer. A connection from the balancer without a header is
// refused, never read as TLS.
func TestProxyProtocolFromTheLoadBalancer(t *testing.T) {
	lb, err := proxyproto.ParseTrusted([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	r := startProxy(t, proxy.Config{Limits: proxy.Limits{MaxConnsPerIP: 1, ProxyProtocolFrom: lb, HandshakeTimeout: 2 * time.Second}})
	dial := func(header []byte) (*tls.Conn, error) {
		t.Helper()
		c, err := net.Dial("tcp", r.addr)
		if err != nil {
			t.Fatal(err)
		}
		if header != nil {
			if _, err := c.Write(header); err != nil {
				t.Fatal(err)
			}
		}
		tc := tls.Client(c, r.tlsConfig(t, nil, 0, "http/1.1"))
		_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, err
		}
		return tc, nil
	}
	first, err := dial(proxyHeader("203.0.113.7:40000"))
	if err != nil {
		t.Fatalf("a client through the balancer: %v", err)
	}
	defer first.Close()
	if c, err := dial(proxyHeader("203.0.113.7:40001")); err == nil {
		c.Close()
		t.Fatal("a second connection of client 203.0.113.7 was let in past max-conns-per-ip 1")
	}
	other, err := dial(proxyHeader("203.0.113.8:40000"))
	if err != nil {
		t.Fatalf("another client through the same balancer was refused (counted as the balancer?): %v", err)
	}
	other.Close()
	if c, err := dial(nil); err == nil {
		c.Close()
		t.Fatal("a connection from the balancer without a PROXY header was served")
	}
}
