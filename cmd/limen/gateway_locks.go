package main

import (
	"context"
	"fmt"
	"time"

	"github.com/limenhq/limen/gateway/adminapi"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/tunnel"
)

// mountLocks wires locks and live sessions into the proxy: the lock store
// and the in-memory set every request is checked against, the session
// registry whose watchdog ends streams, the admin API, and the pushes that
// keep every worker's copy current.
func (s *proxyServer) mountLocks(ctx context.Context, dataDir string) error {
	store, err := locks.Open(ctx, locks.Path(dataDir))
	if err != nil {
		return fmt.Errorf("lock store: %w", err)
	}
	s.Locks = store
	set := locks.NewSet()
	s.LockSet = set
	all, err := store.List(ctx, time.Now())
	if err != nil {
		return fmt.Errorf("lock store: %w", err)
	}
	set.Replace(all)
	// The worker reports each session's one session.end; the proxy's end
	// reason joins it there (proxy.Kube.SessionEvent).
	s.Sessions = sessions.New(sessions.Config{Locks: set, Logger: s.Log.With("component", "sessions")})
	s.Kube.Locks, s.Kube.Sessions = set, s.Sessions

	// A worker serves nothing before it holds the current lock list.
	s.Hooks.connect(func(ctx context.Context, w *tunnel.Worker) error {
		all, err := store.List(ctx, time.Now())
		if err != nil {
			return err
		}
		m, err := locks.ListMessage(all)
		if err != nil {
			return err
		}
		reply, err := w.Request(ctx, m)
		if err != nil {
			return fmt.Errorf("push locks to worker: %w", err)
		}
		return locks.CheckAck(reply)
	})
	api, err := adminapi.New(adminapi.Config{
		LockStore: store, Locks: set, Sessions: s.Sessions, Admin: s.Policy, Principal: s.CA.PrincipalFromRequest, Audit: s.Audit,
		Logger: s.Log.With("component", "admin"),
		OnChange: func(ctx context.Context, c locks.Change) {
			set.Apply(c)
			s.push(ctx, "", func() (tunnel.Message, error) { return locks.ChangeMessage(c) })
		},
		OnKill: func(ctx context.Context, info sessions.Info, by identity.Principal) {
			s.push(ctx, info.Cluster, func() (tunnel.Message, error) { return sessions.KillMessage(info.ID, by.String()) })
		},
	})
	if err != nil {
		return err
	}
	api.Register(s.Mux)
	return nil
}

// push sends a control message to the workers of a cluster ("" for all).
// A worker it cannot reach is dropped by the tunnel and gets the full lock
// list when it reconnects.
func (s *proxyServer) push(ctx context.Context, cluster string, build func() (tunnel.Message, error)) {
	m, err := build()
	if err != nil {
		s.Log.Error("build control message", "err", err)
		return
	}
	if err := s.Tunnel.Broadcast(ctx, cluster, m); err != nil {
		s.Log.Warn("push to workers", "type", m.Type, "err", err)
	}
}
