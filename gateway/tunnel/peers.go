package tunnel

import (
	"cmp"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
)

// Several proxies share one store (issue #28). Every worker keeps a tunnel
// to every live proxy, so that a request landing on any proxy finds every
// connected cluster without a hop between proxies. A proxy learns the live
// proxies from the store (Peers, Announcer) and tells each worker on its
// control stream (TypePeers); the worker's Pool dials each one.

// TypePeers is the proxy's list of the live proxies and the addresses
// workers should dial them at. The proxy sends it when a worker connects
// and whenever the list changes.
const TypePeers = "peers"

// MaxPeers bounds the list a worker accepts: a proxy that names more is
// broken or hostile, and the worker would hold that many tunnels.
const MaxPeers = 64

// maxPeerID bounds a peer's id.
const maxPeerID = 128

// Peer is one live proxy.
type Peer struct {
	// ID names the proxy (stable across its restarts when configured so);
	// it is for logs and deduplication, never for authorization.
	ID string `json:"id"`
	// Addr is the host:port workers dial to reach this proxy directly,
	// bypassing the load balancer; "" means workers cannot (the proxy is
	// reachable only through the address they were enrolled with).
	Addr string `json:"addr"`
}

// PeerList is the body of a TypePeers message.
type PeerList struct {
	// Rev increases with every list one proxy process sends, so that a
	// worker ignores a list overtaken by a newer one from the same session.
	Rev uint64 `json:"rev"`
	// Peers are the live proxies that have an address to dial.
	Peers []Peer `json:"peers"`
}

// NewPeersMessage builds the TypePeers message for l.
func NewPeersMessage(l PeerList) (Message, error) {
	if err := l.validate(); err != nil {
		return Message{}, err
	}
	return NewMessage(TypePeers, l)
}

// DecodePeers reads a TypePeers message from a proxy. The worker dials
// what it names, so everything is checked: at most MaxPeers entries, each
// with a bounded id and a host:port address (a DNS name or an IP address,
// port 1-65535). The peers come back sorted by address, duplicates
// removed.
func DecodePeers(m Message) (PeerList, error) {
	if m.Type != TypePeers {
		return PeerList{}, fmt.Errorf("%w: %q is not %s", ErrBadMessage, m.Type, TypePeers)
	}
	var l PeerList
	if err := m.Decode(&l); err != nil {
		return PeerList{}, err
	}
	if err := l.validate(); err != nil {
		return PeerList{}, err
	}
	slices.SortFunc(l.Peers, func(a, b Peer) int { return cmp.Or(cmp.Compare(a.Addr, b.Addr), cmp.Compare(a.ID, b.ID)) })
	l.Peers = slices.CompactFunc(l.Peers, func(a, b Peer) bool { return a.Addr == b.Addr })
	return l, nil
}

func (l PeerList) validate() error {
	if len(l.Peers) > MaxPeers {
		return fmt.Errorf("%w: %d peers, at most %d", ErrBadMessage, len(l.Peers), MaxPeers)
	}
	for i, p := range l.Peers {
		if len(p.ID) > maxPeerID || !printable(p.ID) {
			return fmt.Errorf("%w: peer %d: id must be at most %d printable bytes", ErrBadMessage, i, maxPeerID)
		}
		if err := ValidPeerAddr(p.Addr); err != nil {
			return fmt.Errorf("%w: peer %d: %v", ErrBadMessage, i, err)
		}
	}
	return nil
}

// ValidPeerAddr checks that addr is host:port with a DNS name or IP address
// as host and a port in 1-65535: what --peer-address must be, and what a
// worker accepts to dial.
func ValidPeerAddr(addr string) error {
	if addr == "" || len(addr) > 253+1+5+2 {
		return fmt.Errorf("address %q: want host:port", addr)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: %v", addr, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port != strconv.Itoa(n) {
		return fmt.Errorf("address %q: port must be 1-65535", addr)
	}
	if net.ParseIP(host) != nil && !strings.Contains(host, "%") {
		return nil
	}
	if !dnsName(host) {
		return fmt.Errorf("address %q: host must be a DNS name or an IP address", addr)
	}
	return nil
}

// dnsName reports whether h is a DNS name: dot-separated labels of letters,
// digits and inner hyphens, each 1-63 bytes, at most 253 in all.
func dnsName(h string) bool {
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}
