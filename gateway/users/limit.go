package users

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limits bounds login attempts per user name and per client address.
type Limits struct {
	// UserBurst attempts for one name, refilled one per UserEvery.
	UserBurst int
	UserEvery time.Duration
	// AddrBurst attempts from one address, refilled one per AddrEvery.
	AddrBurst int
	AddrEvery time.Duration
}

// DefaultLimits are 5 quick tries per name then one every 20 s, and 20
// quick tries per address then one a second.
func DefaultLimits() Limits {
	return Limits{UserBurst: 5, UserEvery: 20 * time.Second, AddrBurst: 20, AddrEvery: time.Second}
}

// maxKeys bounds the limiter's memory; past it, idle entries are dropped,
// and if none are idle new keys are refused (fail closed).
const maxKeys = 50000

type limiter struct {
	l    Limits
	mu   sync.Mutex
	keys map[string]*rate.Limiter
}

func newLimiter(l Limits) *limiter {
	d := DefaultLimits()
	if l.UserBurst == 0 {
		l.UserBurst, l.UserEvery = d.UserBurst, d.UserEvery
	}
	if l.AddrBurst == 0 {
		l.AddrBurst, l.AddrEvery = d.AddrBurst, d.AddrEvery
	}
	return &limiter{l: l, keys: map[string]*rate.Limiter{}}
}

// allow takes one attempt from the user key and one from the address key;
// both must have one left.
func (l *limiter) allow(userKey, addrKey string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	u := l.get(userKey, l.l.UserEvery, l.l.UserBurst, now)
	a := l.get(addrKey, l.l.AddrEvery, l.l.AddrBurst, now)
	if u == nil || a == nil {
		return false
	}
	okU, okA := u.AllowN(now, 1), a.AllowN(now, 1)
	return okU && okA
}

func (l *limiter) get(key string, every time.Duration, burst int, now time.Time) *rate.Limiter {
	if r, ok := l.keys[key]; ok {
		return r
	}
	if len(l.keys) >= maxKeys {
		for k, r := range l.keys {
			if r.TokensAt(now) >= float64(r.Burst()) {
				delete(l.keys, k)
			}
		}
		if len(l.keys) >= maxKeys {
			return nil
		}
	}
	r := rate.NewLimiter(rate.Every(every), burst)
	l.keys[key] = r
	return r
}
