package tunnel

import (
	"math/rand/v2"
	"time"
)

// Backoff defaults for Client fields left zero.
const (
	DefaultMinBackoff   = 500 * time.Millisecond
	DefaultMaxBackoff   = 30 * time.Second
	DefaultHealthyAfter = time.Minute
)

// backoff is capped exponential backoff with "equal jitter": each delay is
// drawn from [d/2, d] where d doubles per failure up to max, so a fleet of
// workers that lost the proxy together does not reconnect in lockstep, yet
// no worker waits less than half its nominal delay.
type backoff struct {
	min, max time.Duration
	attempt  int
	// rand returns a value in [0, n); nil uses math/rand/v2.
	rand func(n int64) int64
}

// next returns the delay before the next attempt and advances the sequence.
func (b *backoff) next() time.Duration {
	d := b.min
	for i := 0; i < b.attempt && d < b.max; i++ {
		d *= 2
	}
	d = min(d, b.max)
	b.attempt++
	half := d / 2
	r := b.rand
	if r == nil {
		r = rand.Int64N
	}
	if half <= 0 {
		return d
	}
	return half + time.Duration(r(int64(half)+1))
}

// reset starts the sequence over, after a connection proved healthy.
func (b *backoff) reset() { b.attempt = 0 }
