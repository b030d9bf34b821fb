package users

import (
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
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

// maxKeys bounds each of the limiter's two tables (names, addresses).
const maxKeys = 50000

// limiter is two token buckets per attempt: one for the client's address,
// one for the name tried. Each bucket is kept as the time at which it will
// be full again (GCRA's "theoretical arrival time"), so a key costs its
// string and eight bytes, and a full bucket is one whose time has passed.
//
// The address is checked first and a refused address touches no name: one
// address spraying fresh names gets its burst of names tracked, no more, so
// it can neither fill the name table nor spend other names' tries.
//
// A full table never refuses a newcomer (that would let anyone lock every
// password login out by filling it). It drops full buckets first, then the
// entries nearest to full: forgetting them gives back the fewest tries, and
// a name someone has just exhausted is the last to go.
type limiter struct {
	l     Limits
	max   int
	mu    sync.Mutex
	names buckets
	addrs buckets
}

// buckets maps a key to the Unix nanosecond at which its bucket is full.
type buckets map[string]int64

func newLimiter(l Limits) *limiter {
	d := DefaultLimits()
	if l.UserBurst == 0 {
		l.UserBurst, l.UserEvery = d.UserBurst, d.UserEvery
	}
	if l.AddrBurst == 0 {
		l.AddrBurst, l.AddrEvery = d.AddrBurst, d.AddrEvery
	}
	return &limiter{l: l, max: maxKeys, names: buckets{}, addrs: buckets{}}
}

// allow takes one attempt from addr's bucket and, only if that had one,
// one from name's; both must have had one.
func (l *limiter) allow(name, addr string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := now.UnixNano()
	if !l.addrs.take(addrKey(addr), l.l.AddrEvery, l.l.AddrBurst, t, l.max) {
		return false
	}
	return l.names.take(name, l.l.UserEvery, l.l.UserBurst, t, l.max)
}

// take spends one try of key's bucket (burst tries, one back per every) if
// it has one left, making room for a new key first.
func (b buckets) take(key string, every time.Duration, burst int, now int64, limit int) bool {
	full, known := b[key]
	if full < now {
		full = now
	}
	// The bucket has a try left unless spending it would put its full time
	// more than burst intervals ahead.
	if full+int64(every)-now > int64(burst)*int64(every) {
		return false
	}
	if !known {
		b.makeRoom(now, limit)
	}
	// A copy, also for a known key (a map assignment stores the key anew):
	// the key may be a slice of a much longer request field, which it would
	// otherwise keep in memory.
	b[strings.Clone(key)] = full + int64(every)
	return true
}

// makeRoom keeps the table below limit entries. When it is full, full
// buckets go (they hold nothing), and if that left less than a quarter of
// it free, the buckets nearest to full go too until a quarter is: the
// sweep's sort is then paid once per limit/4 new keys, however hard the
// table is pushed.
func (b buckets) makeRoom(now int64, limit int) {
	if len(b) < limit {
		return
	}
	for k, full := range b {
		if full <= now {
			delete(b, k)
		}
	}
	keep := limit * 3 / 4
	if len(b) <= keep {
		return
	}
	times := make([]int64, 0, len(b))
	for _, full := range b {
		times = append(times, full)
	}
	slices.Sort(times)
	cut := times[len(times)-keep-1]
	for k, full := range b {
		if full <= cut {
			delete(b, k)
		}
	}
}

// addrKey is the bucket of a client address: an IPv6 address counts as
// its /64, which one host or one customer usually holds whole, so that a
// single network cannot multiply its tries by its addresses.
func addrKey(addr string) string {
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		if len(addr) > 64 {
			addr = addr[:64]
		}
		return addr
	}
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.WithZone("").Prefix(64)
		return p.String()
	}
	return ip.String()
}

// size is the number of keys the limiter tracks, names and addresses.
func (l *limiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.names) + len(l.addrs)
}
