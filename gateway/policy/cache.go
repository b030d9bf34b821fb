package policy

import "sync"

// decisionCache maps a (principal, cluster) key to its groups for one
// snapshot; the revision is implicit because every snapshot has its own
// cache. When full it starts over: bounded memory, no eviction bookkeeping,
// and a full cache is refilled at the uncached cost.
type decisionCache struct {
	max int
	mu  sync.RWMutex
	m   map[string][]string
}

func newDecisionCache(max int) *decisionCache {
	if max <= 0 {
		return nil
	}
	return &decisionCache{max: max, m: make(map[string][]string)}
}

// get returns the cached groups; callers must not modify them.
func (c *decisionCache) get(key []byte) ([]string, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.RLock()
	g, ok := c.m[string(key)] // no allocation: the compiler special-cases this lookup
	c.mu.RUnlock()
	return g, ok
}

func (c *decisionCache) put(key []byte, groups []string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	if len(c.m) >= c.max {
		c.m = make(map[string][]string, c.max/4)
	}
	c.m[string(key)] = groups
	c.mu.Unlock()
}
