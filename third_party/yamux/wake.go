// This file is Limen's, added to yamux v0.1.2 (see LIMEN.md); it is under
// the same license as the rest of this directory (MPL-2.0).

package yamux

// OnWake arranges for f to run, in a goroutine of its own, the first time a
// reader of the stream would be woken from now on: data arrived, the peer's
// FIN or RST, the stream closed here, or its session ended. If one of these
// already happened (data unread, the peer done, the stream closed), f runs
// at once. Stop unsets f and reports whether it did so before f ran; a
// later OnWake replaces an f that has not run.
//
// It lets a caller that must learn when the peer gives up (Limen's worker
// while it relays a response) wait without a goroutine parked in Read for
// the stream's whole life.
func (s *Stream) OnWake(f func()) (stop func() bool) {
	p := &f
	s.wake.Store(p)
	// Checked after the store: a wake-up racing with it either sees f or
	// is seen here.
	if s.woken() {
		s.fireWake()
	}
	return func() bool { return s.wake.CompareAndSwap(p, nil) }
}

// woken reports whether a reader would not block now.
func (s *Stream) woken() bool {
	s.stateLock.Lock()
	state := s.state
	s.stateLock.Unlock()
	switch state {
	case streamRemoteClose, streamClosed, streamReset:
		return true
	}
	s.recvLock.Lock()
	defer s.recvLock.Unlock()
	return s.recvBuf != nil && s.recvBuf.Len() > 0
}

// fireWake runs the function OnWake set, once. It is on every data frame's
// path: a plain load first, the swap only when a function is set.
func (s *Stream) fireWake() {
	if s.wake.Load() == nil {
		return
	}
	if p := s.wake.Swap(nil); p != nil {
		go (*p)()
	}
}
