package proxy

import (
	"context"
	"time"

	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/sessions"
	"github.com/limenhq/limen/gateway/store"
	"github.com/limenhq/limen/gateway/tunnel"
)

// Kills across proxies (issue #28): a session is relayed by the proxy its
// client reached, but an admin may kill it from any proxy. The killing
// proxy marks the session in the shared directory, the store announces it
// (store.KillsChannel), and the relaying proxy re-reads the row and ends
// the session as if killed here: its registry, then its worker.

// remoteKillWait bounds how long a kill through another proxy waits for
// that proxy to record the session's end, so that the answer can say it
// ended; past it the answer is the session as last listed.
const remoteKillWait = 2 * time.Second

// sessionView is what the console and the admin API list: this proxy's
// sessions and those of the others on the database.
func (s *Server) sessionView() sessionView {
	return sessionView{local: s.Sessions, dir: s.sessionDir, log: s.log}
}

// pushKill tells the workers of info's cluster to end the session too.
func (s *Server) pushKill(ctx context.Context, info sessions.Info, by string) {
	s.push(ctx, info.Cluster, func() (tunnel.Message, error) { return sessions.KillMessage(info.ID, by) },
		func(m tunnel.Message) error { _, err := sessions.CheckKillAck(m); return err })
}

// remoteKill asks the proxy relaying session id to kill it (the admin API's
// RemoteKill) and waits a little for it to do so.
func (s *Server) remoteKill(ctx context.Context, id string, by identity.Principal) (sessions.Info, error) {
	info, err := s.sessionDir.RequestKill(ctx, id, by.String())
	if err != nil {
		return info, err
	}
	t := time.NewTicker(25 * time.Millisecond)
	defer t.Stop()
	wait, cancel := context.WithTimeout(ctx, remoteKillWait)
	defer cancel()
	for info.Live() {
		select {
		case <-wait.Done():
			return info, nil
		case <-t.C:
		}
		if i, ok, err := s.sessionDir.Other(wait, id); err == nil && ok {
			info = i
		}
	}
	return info, nil
}

// watchKills ends this proxy's sessions that another proxy asked to kill,
// as each request is announced, and re-reads every live session's row
// whenever the feed (re)connects, for requests announced while it was down.
func (s *Server) watchKills(ctx context.Context, feed store.Feed) {
	check := func(id string) {
		by, err := s.sessionDir.KillRequest(ctx, id)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("kill request unreadable", "session", id, "err", err)
			}
			return
		}
		if by == "" {
			return
		}
		info, ok := s.Sessions.Get(id)
		if ok && s.Sessions.Kill(id) {
			s.log.Info("session killed through another proxy", "session", id, "by", by)
			s.pushKill(ctx, info, by)
		}
	}
	_ = feed.Watch(ctx, store.KillsChannel, func() {
		for _, i := range s.Sessions.List() {
			if i.Live() {
				check(i.ID)
			}
		}
	}, check)
}
