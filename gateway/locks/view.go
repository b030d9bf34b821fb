package locks

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// A proxy's Set is a copy of the lock store, re-read every second and on
// every announcement. While the store does not answer, the copy may miss a
// lock set through another proxy, so a proxy bounds how long it trusts an
// unconfirmed copy (issue #28): past StaleAfter, in strict mode, Check
// refuses everyone and the proxy ends its streams; in best-effort mode it
// keeps serving on the last copy. Teleport calls the two modes strict and
// best_effort.

// Mode is what a proxy does once its lock view is stale.
type Mode string

// Modes.
const (
	// ModeStrict refuses every request and ends every stream (the default).
	ModeStrict Mode = "strict"
	// ModeBestEffort keeps serving on the last lock view, and says so.
	ModeBestEffort Mode = "best-effort"
)

// DefaultStaleAfter is how long a lock view may go unconfirmed by default.
const DefaultStaleAfter = 30 * time.Second

// ParseMode parses a --lock-mode value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeStrict, ModeBestEffort:
		return m, nil
	}
	return "", fmt.Errorf("%q is not a lock mode: use %s (refuse requests and end streams while the lock view is stale) or %s (keep serving on the last lock view)",
		s, ModeStrict, ModeBestEffort)
}

// StaleError refuses a caller because the lock view is stale (strict mode).
type StaleError struct {
	// Since is when the view was last confirmed; After the bound.
	Since time.Time
	After time.Duration
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("Limen cannot confirm which users are locked: its lock store has not answered since %s (lock-stale-after is %s), "+
		"so it refuses every request until the store answers again; retry in a moment, and tell the operator if it lasts (check the database)",
		e.Since.UTC().Format(time.RFC3339), e.After)
}

// HTTPStatus is the status for an error from Check: 503 while the lock view
// is stale (the caller may retry), 403 for a lock.
func HTTPStatus(err error) int {
	if _, ok := errors.AsType[*StaleError](err); ok {
		return http.StatusServiceUnavailable
	}
	return http.StatusForbidden
}

// Guard makes the set refuse, in strict mode, once it has not been
// Confirmed for after; it counts as confirmed now. Call it before use;
// after <= 0 keeps the set trusted forever (the worker's: its proxies
// push every change and a full list on every reconnect).
func (s *Set) Guard(after time.Duration, mode Mode) {
	s.staleAfter, s.mode = after, mode
	s.Confirmed(s.now())
}

// Confirmed records that the set was compared with the store at t.
func (s *Set) Confirmed(t time.Time) { s.confirmed.Store(t.UnixNano()) }

// Stale returns a *StaleError when the set is guarded and was last
// confirmed longer than its bound before now, in either mode; nil
// otherwise.
func (s *Set) Stale(now time.Time) error {
	if s.staleAfter <= 0 {
		return nil
	}
	since := time.Unix(0, s.confirmed.Load())
	if now.Sub(since) <= s.staleAfter {
		return nil
	}
	return &StaleError{Since: since, After: s.staleAfter}
}

// Mode is the set's mode once stale ("" when unguarded).
func (s *Set) Mode() Mode { return s.mode }

// refuseStale is Stale when the mode is strict.
func (s *Set) refuseStale(now time.Time) error {
	if s.mode != ModeStrict {
		return nil
	}
	return s.Stale(now)
}
