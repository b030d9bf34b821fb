package proxyproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// header builds a version 2 header: cmd, family byte, address bytes, TLVs.
func header(cmd, fam byte, body []byte) []byte {
	b := append([]byte(nil), signature...)
	b = append(b, 0x20|cmd, fam)
	b = binary.BigEndian.AppendUint16(b, uint16(len(body)))
	return append(b, body...)
}

func ipv4Body(src, dst string, sport, dport uint16, tlv []byte) []byte {
	s, d := netip.MustParseAddr(src).As4(), netip.MustParseAddr(dst).As4()
	b := append(append([]byte(nil), s[:]...), d[:]...)
	b = binary.BigEndian.AppendUint16(b, sport)
	b = binary.BigEndian.AppendUint16(b, dport)
	return append(b, tlv...)
}

func TestRead(t *testing.T) {
	v6s, v6d := netip.MustParseAddr("2001:db8::7").As16(), netip.MustParseAddr("2001:db8::1").As16()
	v6 := append(append([]byte(nil), v6s[:]...), v6d[:]...)
	v6 = binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(v6, 40000), 443)
	tests := []struct {
		name string
		in   []byte
		want Header
	}{
		{"ipv4", header(1, 0x11, ipv4Body("203.0.113.7", "10.0.0.5", 51234, 8443, nil)),
			Header{Source: netip.MustParseAddrPort("203.0.113.7:51234"), Dest: netip.MustParseAddrPort("10.0.0.5:8443")}},
		{"ipv4 with TLVs", header(1, 0x11, ipv4Body("203.0.113.7", "10.0.0.5", 1, 2, []byte{0x04, 0x00, 0x01, 0x00})),
			Header{Source: netip.MustParseAddrPort("203.0.113.7:1"), Dest: netip.MustParseAddrPort("10.0.0.5:2")}},
		{"ipv6", header(1, 0x21, v6),
			Header{Source: netip.MustParseAddrPort("[2001:db8::7]:40000"), Dest: netip.MustParseAddrPort("[2001:db8::1]:443")}},
		{"local (a health check)", header(0, 0x00, nil), Header{Local: true}},
		{"local with addresses", header(0, 0x11, ipv4Body("1.2.3.4", "5.6.7.8", 1, 2, nil)), Header{Local: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := bytes.NewReader(append(tt.in, "TLS"...))
			got, err := Read(r)
			if err != nil || got != tt.want {
				t.Fatalf("Read = %+v, %v; want %+v", got, err, tt.want)
			}
			if rest, _ := io.ReadAll(r); string(rest) != "TLS" {
				t.Fatalf("Read consumed past the header: %q left", rest)
			}
		})
	}
}

func TestReadRefuses(t *testing.T) {
	good := header(1, 0x11, ipv4Body("203.0.113.7", "10.0.0.5", 1, 2, nil))
	long := header(1, 0x11, ipv4Body("203.0.113.7", "10.0.0.5", 1, 2, make([]byte, MaxHeader)))
	v1 := []byte("PROXY TCP4 203.0.113.7 10.0.0.5 1 2\r\n")
	tests := []struct {
		name string
		in   []byte
		why  string
	}{
		{"empty", nil, "EOF"},
		{"TLS client hello, no header", []byte("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\x00\x00\x00\x00\x00"), "no signature"},
		{"version 1 text", v1, "no signature"},
		{"version 3", append(append(append([]byte(nil), signature...), 0x31, 0x11), good[14:]...), "version 3"},
		{"unknown command", append(append(append([]byte(nil), signature...), 0x2f, 0x11), good[14:]...), "command 15"},
		{"UDP", header(1, 0x12, ipv4Body("203.0.113.7", "10.0.0.5", 1, 2, nil)), "family"},
		{"unix socket", header(1, 0x31, make([]byte, 216)), "family"},
		{"unspecified family with PROXY", header(1, 0x00, nil), "family"},
		{"addresses cut short", header(1, 0x11, make([]byte, 8)), "need 12"},
		{"ipv6 cut short", header(1, 0x21, make([]byte, 12)), "need 36"},
		{"too long", long, "more than"},
		{"truncated body", good[:len(good)-3], "EOF"},
		{"truncated fixed part", good[:10], "EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := Read(bytes.NewReader(tt.in))
			if !errors.Is(err, ErrHeader) || !strings.Contains(err.Error(), tt.why) {
				t.Fatalf("Read = %+v, %v; want an ErrHeader saying %q", h, err, tt.why)
			}
		})
	}
}

func FuzzRead(f *testing.F) {
	f.Add(header(1, 0x11, ipv4Body("203.0.113.7", "10.0.0.5", 1, 2, nil)))
	f.Add(header(0, 0x00, nil))
	f.Add([]byte("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		h, err := Read(r)
		if err != nil {
			if !errors.Is(err, ErrHeader) {
				t.Fatalf("error %v does not wrap ErrHeader", err)
			}
			return
		}
		used := len(in) - r.Len()
		if used > 16+MaxHeader || used < 16 {
			t.Fatalf("read %d bytes", used)
		}
		if !h.Local && (!h.Source.IsValid() || !h.Dest.IsValid()) {
			t.Fatalf("accepted a PROXY header without addresses: %+v", h)
		}
	})
}

func TestParseTrusted(t *testing.T) {
	tr, err := ParseTrusted([]string{"10.0.0.0/8", "192.0.2.7", "2001:db8::/32"})
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]bool{
		"10.1.2.3:5": true, "192.0.2.7:5": true, "192.0.2.8:5": false, "[2001:db8::9]:5": true,
		"[::ffff:10.0.0.1]:5": true, "127.0.0.1:5": false,
	} {
		if got := tr.Trusts(net.TCPAddrFromAddrPort(netip.MustParseAddrPort(addr))); got != want {
			t.Errorf("Trusts(%s) = %v, want %v", addr, got, want)
		}
	}
	for _, bad := range []string{"", "10.0.0.0/33", "lb.example.com", "10.0.0.1:80", "fe80::1%eth0", "10.0.0.0/8,10.1.0.0/16"} {
		if _, err := ParseTrusted([]string{bad}); err == nil {
			t.Errorf("ParseTrusted(%q) accepted", bad)
		}
	}
	if (Trusted(nil)).Trusts(&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1)}) {
		t.Error("an empty list trusts an address")
	}
}

// TestAccept: the connection's RemoteAddr becomes the header's source; a
// LOCAL header keeps the connection's own; a silent peer is cut at the
// deadline.
func TestAccept(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	go func() {
		_, _ = b.Write(header(1, 0x11, ipv4Body("203.0.113.7", "10.0.0.5", 51234, 8443, nil)))
		_, _ = b.Write([]byte("hello"))
	}()
	c, _, err := Accept(a, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.RemoteAddr().String(); got != "203.0.113.7:51234" {
		t.Fatalf("RemoteAddr = %s", got)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("after the header: %q %v", buf, err)
	}
	silent, peer := net.Pipe()
	defer peer.Close()
	if _, _, err := Accept(silent, 50*time.Millisecond); err == nil {
		t.Fatal("a peer that sends nothing was accepted")
	}
}
