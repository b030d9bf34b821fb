package proxy

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/limenhq/limen/gateway/console"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/store/sqlite"
	"github.com/limenhq/limen/gateway/tunnel"
)

// The console's two needs from the workers, neither on the request path:
// a live session's output (the worker streams the recording it writes
// anyway, only while someone watches) and each worker's policy status.

// observeWait bounds how long a live view waits for the worker holding the
// session to open its stream.
const observeWait = 5 * time.Second

// maxLiveViews bounds the live views open at once per cluster. Each holds
// one of the streams a worker may open toward the proxy
// (tunnel.DefaultMaxWorkerStreams), which recording uploads need too: two
// leave the uploads theirs.
const maxLiveViews = 2

// policyWait bounds how long the policy page waits for the workers'
// reports; a worker that did not answer is shown as such.
const policyWait = 2 * time.Second

// consoleBridge pairs the console's requests with the workers' answers.
type consoleBridge struct {
	mu sync.Mutex
	// watchers are the live views waiting for their stream, by nonce.
	watchers map[string]*watcher
	// reports are the policy status reports awaited, by worker session.
	reports map[string]chan policy.Status
	// live counts the live views open, by cluster.
	live map[string]int
}

type watcher struct {
	info   sessions.Info
	stream chan *observed
}

// observed is a worker's live-view stream, past its first line. Close
// ends it and lets the worker's stream handler return.
type observed struct {
	r    *bufio.Reader
	conn net.Conn
	once sync.Once
	done chan struct{}
	// release gives back the cluster's live-view slot.
	release func()
}

func (o *observed) Read(p []byte) (int, error) { return o.r.Read(p) }
func (o *observed) Close() error {
	o.once.Do(func() {
		close(o.done)
		_ = o.conn.Close()
		if o.release != nil {
			o.release()
		}
	})
	return nil
}

// mountConsole registers the console's control-stream handlers and mounts
// it at /console/.
func (s *Server) mountConsole(c Config) error {
	b := &consoleBridge{watchers: map[string]*watcher{}, reports: map[string]chan policy.Status{}, live: map[string]int{}}
	s.control.stream(sessions.ObserveStreamKind, b.receive)
	s.control.handle(policy.TypeStatusReport, func(ctx context.Context, w workerConn, m tunnel.Message) {
		var st policy.Status
		if err := m.Decode(&st); err != nil {
			s.log.Warn("malformed policy status from worker", "cluster", w.Info().Cluster, "err", err)
			return
		}
		b.mu.Lock()
		ch := b.reports[w.Info().SessionID]
		b.mu.Unlock()
		if ch != nil {
			select {
			case ch <- st:
			default:
			}
		}
	})
	var signInOIDC func(string) console.OIDCFlow
	switch {
	case s.OIDC != nil && c.ConsoleOIDCRedirectURL != "":
		signInOIDC = func(redirect string) console.OIDCFlow { return s.OIDC.Flow(redirect) }
	case s.OIDC != nil:
		s.log.Info("console: sign-in through the identity provider is off: set console-oidc-redirect-uri to the console's callback registered there")
	}
	signIns, err := s.store.SignIns(context.Background())
	if err != nil {
		return fmt.Errorf("console sign-ins: %w", err)
	}
	h, err := console.New(console.Config{
		SignIns: signIns,
		Users:   s.Users, Admin: s.Policy, Locks: s.LockSet, Audit: s.Denials, Events: s.Audit,
		Recordings: s.recordings, Sessions: s.sessionView(), Control: s.admin,
		PolicyStatus: func(ctx context.Context) []console.PolicyHop { return s.policyStatus(ctx, b) },
		Observe: func(ctx context.Context, info sessions.Info) (io.ReadCloser, error) {
			return s.observe(ctx, b, info)
		},
		Clusters: func(ctx context.Context, p identity.Principal) ([]string, error) {
			return configuredClusters{engine: s.Policy, names: c.Clusters, labels: c.ClusterLabels}.Clusters(ctx, p)
		},
		Access: s.Kube.Access, OIDC: signInOIDC, OIDCRedirectURL: c.ConsoleOIDCRedirectURL, Requests: s.Requests,
		Now: c.Now, Logger: s.log.With("component", "console"),
	})
	if err != nil {
		return err
	}
	s.Mux.Handle(console.Prefix, h)
	return nil
}

// observe asks the workers of info's cluster for the session's live
// output and returns the stream the one holding it opens.
func (s *Server) observe(ctx context.Context, b *consoleBridge, info sessions.Info) (io.ReadCloser, error) {
	release, err := b.take(info.Cluster)
	if err != nil {
		return nil, err
	}
	handed := false
	defer func() {
		if !handed {
			release()
		}
	}()
	nonce := make([]byte, 16)
	rand.Read(nonce)
	w := &watcher{info: info, stream: make(chan *observed, 1)}
	key := hex.EncodeToString(nonce)
	b.mu.Lock()
	b.watchers[key] = w
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.watchers, key)
		b.mu.Unlock()
	}()
	m, err := tunnel.NewMessage(sessions.TypeObserve, sessions.Observe{ID: info.ID, Nonce: key})
	if err != nil {
		return nil, err
	}
	if err := s.Tunnel.Broadcast(ctx, info.Cluster, m); err != nil {
		return nil, fmt.Errorf("ask the workers of %s: %w", info.Cluster, err)
	}
	t := time.NewTimer(observeWait)
	defer t.Stop()
	select {
	case o := <-w.stream:
		o.release, handed = release, true
		return o, nil
	case <-t.C:
		return nil, fmt.Errorf("no worker of cluster %s sent the output of session %s within %s", info.Cluster, info.ID, observeWait)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// take reserves one of cluster's live-view slots; release gives it back.
func (b *consoleBridge) take(cluster string) (release func(), _ error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.live[cluster] >= maxLiveViews {
		return nil, fmt.Errorf("%d live views of cluster %s are open, the most at once: close one and try again", maxLiveViews, cluster)
	}
	b.live[cluster]++
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.live[cluster]--
		})
	}, nil
}

// receive takes a worker's live-view stream to the watcher that asked for
// it: the nonce must be one asked for, of that session, from a worker of
// the session's cluster. The stream stays open until the watcher closes it.
func (b *consoleBridge) receive(ctx context.Context, w workerConn, conn net.Conn) {
	_ = conn.SetReadDeadline(time.Now().Add(observeWait))
	r := bufio.NewReaderSize(conn, 32<<10)
	line, err := r.ReadSlice('\n')
	_ = conn.SetReadDeadline(time.Time{})
	if err != nil {
		return
	}
	var o sessions.Observe
	if json.Unmarshal(line, &o) != nil || o.Validate() != nil {
		return
	}
	b.mu.Lock()
	wt := b.watchers[o.Nonce]
	b.mu.Unlock()
	if wt == nil || wt.info.ID != o.ID || wt.info.Cluster != w.Info().Cluster {
		return
	}
	ob := &observed{r: r, conn: conn, done: make(chan struct{})}
	select {
	case wt.stream <- ob:
	default:
		return // another worker answered first
	}
	select {
	case <-ob.done:
	case <-ctx.Done():
		ob.Close()
	}
}

// policyStatus is this proxy's policy status and each connected worker's,
// asked for now.
func (s *Server) policyStatus(ctx context.Context, b *consoleBridge) []console.PolicyHop {
	host, _ := os.Hostname()
	out := []console.PolicyHop{{Hop: "proxy", Name: host, Status: s.Policy.Status()}}
	if s.store.Engine() != sqlite.Engine {
		// The proxies of one database: their floor and refusals.
		hop := console.PolicyHop{Hop: "proxies", Name: "every proxy (shared store)"}
		if st, err := s.Policy.SharedStatus(ctx); err != nil {
			hop.Err = err.Error()
		} else {
			hop.Status = st
		}
		out = append(out, hop)
	}
	workers := s.Tunnel.Workers()
	chans := make([]chan policy.Status, len(workers))
	b.mu.Lock()
	for i, w := range workers {
		chans[i] = make(chan policy.Status, 1)
		b.reports[w.SessionID] = chans[i]
	}
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		for _, w := range workers {
			delete(b.reports, w.SessionID)
		}
		b.mu.Unlock()
	}()
	m, _ := tunnel.NewMessage(policy.TypeStatusQuery, struct{}{})
	for _, w := range workers {
		_ = s.Tunnel.SendTo(ctx, w.SessionID, m)
	}
	deadline := time.NewTimer(policyWait)
	defer deadline.Stop()
	for i, w := range workers {
		hop := console.PolicyHop{Hop: "worker", Name: w.WorkerID, Cluster: w.Cluster}
		select {
		case st := <-chans[i]:
			hop.Status = st
		case <-deadline.C:
			hop.Err = "the worker did not report its policy status within " + policyWait.String()
			// The timer fired once: every later worker is out of time too.
			deadline.Reset(0)
		case <-ctx.Done():
			hop.Err = errors.Join(ctx.Err()).Error()
		}
		out = append(out, hop)
	}
	return out
}

// sessionView is what the console lists: this proxy's registry, then the
// sessions the other proxies on the database relay (Info.Proxy names the
// proxy; the console can watch and kill only its own).
type sessionView struct {
	local *sessions.Registry
	dir   *sessions.Directory
	log   *slog.Logger
}

// directoryWait bounds the console's read of the session directory.
const directoryWait = 2 * time.Second

func (v sessionView) List() []sessions.Info {
	out := v.local.List()
	ctx, cancel := context.WithTimeout(context.Background(), directoryWait)
	defer cancel()
	others, err := v.dir.Others(ctx, sessions.DefaultRecent)
	if err != nil {
		v.log.Warn("other proxies' sessions not listed", "err", err)
	}
	return append(out, others...)
}

// Kill kills a session of this proxy's; the admin API asks the directory
// for the others' (Server.remoteKill).
func (v sessionView) Kill(id string) bool { return v.local.Kill(id) }

func (v sessionView) Get(id string) (sessions.Info, bool) {
	if i, ok := v.local.Get(id); ok {
		return i, true
	}
	ctx, cancel := context.WithTimeout(context.Background(), directoryWait)
	defer cancel()
	i, ok, err := v.dir.Other(ctx, id)
	if err != nil {
		v.log.Warn("session directory unreadable", "session", id, "err", err)
	}
	return i, ok
}
