package proxy

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"time"

	"github.com/limenhq/limen/gateway/store"
	"github.com/limenhq/limen/gateway/tunnel"
)

// Several proxies on one store (issue #28): every worker keeps a tunnel to
// every live proxy, so a request landing on any proxy reaches every
// connected cluster with no hop between proxies, and a proxy's death takes
// only its own tunnels. The proxy beats in Config.Peers, reads back the
// live proxies, and tells its workers where to dial them (tunnel.Announcer);
// a worker told nothing keeps only the tunnel to its enrolled address.

// newAnnouncer builds the proxy's peer announcer and registers it on the
// worker tunnels: each worker hears the live proxies when it connects.
func (s *Server) newAnnouncer(c Config, id string) error {
	if c.PeerAddress != "" {
		if err := tunnel.ValidPeerAddr(c.PeerAddress); err != nil {
			return fmt.Errorf("peer-address: %w", err)
		}
	}
	peers := c.Peers
	if dir, ok := s.store.(store.PeerDirectory); ok && peers == nil {
		// Several proxies on one database find each other there.
		sp := storePeers{dir: dir, ttl: c.PeerTTL}
		peers = sp
		// A proxy that stopped beating died with its streams: the
		// directory must not list them live forever.
		s.sessionDir.SetLive(func(ctx context.Context) (map[string]bool, error) {
			live, err := sp.Live(ctx)
			if err != nil {
				return nil, err
			}
			m := map[string]bool{id: true}
			for _, p := range live {
				m[p.ID] = true
			}
			return m, nil
		})
	}
	if peers == nil {
		// One proxy: the list is this proxy alone (with its address when
		// --peer-address is set).
		peers = &tunnel.MemPeers{TTL: c.PeerTTL}
	}
	s.Tunnel.ID = id
	s.peers = &tunnel.Announcer{Peers: peers, Self: tunnel.Peer{ID: s.Tunnel.ID, Addr: c.PeerAddress},
		Server: s.Tunnel, Interval: c.PeerHeartbeat, Stale: c.PeerTTL, Logger: s.log.With("component", "peers")}
	s.control.connect(func(ctx context.Context, w workerConn) error { return s.peers.OnConnect(ctx, w) })
	s.readyCheck("peers", func(context.Context) error { return s.peers.Ready() })
	return nil
}

// newProxyID names this proxy process among its peers: its host name (a
// pod name under Kubernetes) and a random suffix, since two processes may
// share a host.
func newProxyID() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "proxy"
	}
	return host + "-" + rand.Text()[:8]
}

// storePeers is tunnel.Peers over the shared database's directory of
// proxies; liveness is judged by the database's clock.
type storePeers struct {
	dir store.PeerDirectory
	ttl time.Duration
}

func (p storePeers) Heartbeat(ctx context.Context, self tunnel.Peer) error {
	return p.dir.Heartbeat(ctx, store.PeerRecord{ID: self.ID, Addr: self.Addr})
}

func (p storePeers) Live(ctx context.Context) ([]tunnel.Peer, error) {
	ttl := p.ttl
	if ttl <= 0 {
		ttl = tunnel.DefaultPeerTTL
	}
	recs, err := p.dir.Live(ctx, ttl)
	if err != nil {
		return nil, err
	}
	out := make([]tunnel.Peer, len(recs))
	for i, r := range recs {
		out[i] = tunnel.Peer{ID: r.ID, Addr: r.Addr}
	}
	return out, nil
}
