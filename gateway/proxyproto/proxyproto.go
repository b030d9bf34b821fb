// Package proxyproto reads the PROXY protocol version 2 header that a TCP
// load balancer (HAProxy's send-proxy-v2, an AWS NLB, Envoy) puts before a
// connection's first byte, so that a proxy behind it knows the client's
// address: for the audit trail, and for the per-address connection limit
// that would otherwise count every client as the balancer.
//
// Only version 2 (binary) is read. A header is trusted only from the
// balancers the operator names; the caller decides that by the
// connection's own address, and refuses a connection from a named
// balancer without a valid header (never a guess at what follows).
package proxyproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"
)

// signature starts every version 2 header.
var signature = []byte("\r\n\r\n\x00\r\nQUIT\n")

// MaxHeader bounds the bytes after the fixed 16: addresses and TLVs. A
// balancer sends a few dozen; more is refused rather than read.
const MaxHeader = 1024

// ErrHeader is wrapped by every refusal of a header.
var ErrHeader = errors.New("invalid PROXY protocol v2 header")

// Header is what a header says.
type Header struct {
	// Local marks a connection the balancer made itself (a health check):
	// it carries no client address, and the connection's own counts.
	Local bool
	// Source is the client's address and port; Dest the address the
	// client dialed. Both are invalid when Local.
	Source, Dest netip.AddrPort
}

// Read reads one header from r, no byte past it.
func Read(r io.Reader) (Header, error) {
	var fixed [16]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return Header{}, fmt.Errorf("%w: %w", ErrHeader, err)
	}
	if !bytes.Equal(fixed[:12], signature) {
		return Header{}, fmt.Errorf("%w: no signature (the balancer must send PROXY protocol version 2, such as HAProxy's send-proxy-v2)", ErrHeader)
	}
	if v := fixed[12] >> 4; v != 2 {
		return Header{}, fmt.Errorf("%w: version %d", ErrHeader, v)
	}
	cmd, fam, n := fixed[12]&0x0f, fixed[13], int(binary.BigEndian.Uint16(fixed[14:]))
	if n > MaxHeader {
		return Header{}, fmt.Errorf("%w: %d bytes of addresses and TLVs, more than %d", ErrHeader, n, MaxHeader)
	}
	rest := make([]byte, n)
	if _, err := io.ReadFull(r, rest); err != nil {
		return Header{}, fmt.Errorf("%w: %w", ErrHeader, err)
	}
	switch cmd {
	case 0x0: // LOCAL: the balancer's own connection; addresses ignored
		return Header{Local: true}, nil
	case 0x1: // PROXY
	default:
		return Header{}, fmt.Errorf("%w: command %d", ErrHeader, cmd)
	}
	var size int
	switch fam {
	case 0x11: // TCP over IPv4
		size = 12
	case 0x21: // TCP over IPv6
		size = 36
	default:
		return Header{}, fmt.Errorf("%w: address family and transport 0x%02x (only TCP over IPv4 or IPv6)", ErrHeader, fam)
	}
	if n < size {
		return Header{}, fmt.Errorf("%w: %d bytes for addresses that need %d", ErrHeader, n, size)
	}
	alen := (size - 4) / 2
	src, _ := netip.AddrFromSlice(rest[:alen])
	dst, _ := netip.AddrFromSlice(rest[alen : 2*alen])
	sport := binary.BigEndian.Uint16(rest[2*alen:])
	dport := binary.BigEndian.Uint16(rest[2*alen+2:])
	return Header{Source: netip.AddrPortFrom(src, sport), Dest: netip.AddrPortFrom(dst, dport)}, nil
}

// Accept reads c's header within timeout and returns c with the client's
// address as its RemoteAddr (c itself for a LOCAL header).
func Accept(c net.Conn, timeout time.Duration) (net.Conn, Header, error) {
	if err := c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return nil, Header{}, err
	}
	h, err := Read(c)
	if err != nil {
		return nil, h, err
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		return nil, h, err
	}
	if h.Local {
		return c, h, nil
	}
	return &conn{Conn: c, remote: net.TCPAddrFromAddrPort(h.Source)}, h, nil
}

// conn is a connection whose client is the header's source.
type conn struct {
	net.Conn
	remote net.Addr
}

func (c *conn) RemoteAddr() net.Addr { return c.remote }

// Trusted is the set of balancers whose headers are read.
type Trusted []netip.Prefix

// ParseTrusted parses addresses and CIDR prefixes (10.0.0.0/8, 192.0.2.7,
// 2001:db8::/32).
func ParseTrusted(list []string) (Trusted, error) {
	var out Trusted
	for _, s := range list {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("%q is neither an IP address nor a CIDR prefix such as 10.0.0.0/8", s)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// Trusts reports whether a connection from addr comes from a balancer of t.
func (t Trusted) Trusts(addr net.Addr) bool {
	ta, ok := addr.(*net.TCPAddr)
	if !ok || len(t) == 0 {
		return false
	}
	ap := ta.AddrPort()
	ip := ap.Addr().Unmap()
	for _, p := range t {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}
