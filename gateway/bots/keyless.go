package bots

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/limenhq/limen/gateway/store"
)

// CIKind is which CI system a trusted CI issuer is. Policy decides with it
// which claims pin a token to one owner (policies/bots.rego owner_claims):
// an entry that binds only ref would admit any repository's token minted
// for the proxy's audience.
type CIKind string

// The CI kinds policy knows.
const (
	// KindGitHub: GitHub Actions; owner-bound claims repository_owner_id,
	// repository_id.
	KindGitHub CIKind = "github"
	// KindGitLab: GitLab CI; owner-bound claims namespace_id, project_id.
	KindGitLab CIKind = "gitlab"
	// KindGeneric: another issuer; its subject is what pins the workload.
	KindGeneric CIKind = "generic"
)

// ParseCIKind reads a CIKind.
func ParseCIKind(s string) (CIKind, error) {
	switch k := CIKind(s); k {
	case KindGitHub, KindGitLab, KindGeneric:
		return k, nil
	}
	return "", fmt.Errorf("%q is not a CI kind: want %s, %s or %s", s, KindGitHub, KindGitLab, KindGeneric)
}

// KindOfIssuer recognises the public CI issuers by URL; ok is false for
// any other (a GitHub Enterprise Server, a self-managed GitLab, a test
// provider), whose kind the operator must state.
func KindOfIssuer(issuer string) (kind CIKind, ok bool) {
	u, err := url.Parse(issuer)
	if err != nil || u.Scheme != "https" || (u.Path != "" && u.Path != "/") {
		return "", false
	}
	switch u.Host {
	case "token.actions.githubusercontent.com":
		return KindGitHub, true
	case "gitlab.com":
		return KindGitLab, true
	}
	return "", false
}

// Errors of the replay cache.
var (
	// ErrReplayed means a token with this id logged in before and has not
	// expired: someone else may hold a copy of it.
	ErrReplayed = errors.New("this CI token was used before (its jti was seen): mint a new one for each login")
	// ErrReplayFull means the cache holds as many live tokens as it may;
	// the login is refused rather than a remembered token forgotten.
	ErrReplayFull = errors.New("too many CI token logins within their lifetime: try again when some have expired")
)

// Replays is what a keyless login asks so that a CI token logs in once: a
// ReplayCache (one proxy's memory) or SharedReplays (every proxy on one
// database). Use returns ErrReplayed for a token seen before.
type Replays interface {
	Use(key string, expiry, now time.Time) error
}

// ErrReplayUnknown means the shared ledger could not be asked, so the
// login is refused: a token whose reuse cannot be ruled out gets nothing.
var ErrReplayUnknown = errors.New("could not check that this CI token was not used before (the database did not answer): try again shortly")

// SharedReplays is Replays over the store's ledger, shared by every proxy
// of the deployment: a token used at one proxy is refused at all.
type SharedReplays struct {
	Ledger store.ReplayLedger
	// Timeout bounds one check (0: 5s).
	Timeout time.Duration
}

// Use records key until expiry, or refuses it as a replay; a ledger that
// does not answer refuses the login (ErrReplayUnknown).
func (r SharedReplays) Use(key string, expiry, now time.Time) error {
	if !expiry.After(now) {
		return nil // expired already: the verifier refuses it anyway
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(r.Timeout, 5*time.Second))
	defer cancel()
	fresh, err := r.Ledger.UseOnce(ctx, key, expiry.UnixNano(), now.UnixNano())
	if err != nil {
		return fmt.Errorf("%w: %w", ErrReplayUnknown, err)
	}
	if !fresh {
		return ErrReplayed
	}
	return nil
}

// ReplayCache remembers the ids (jti) of the CI tokens that logged in until
// each token expires, so that a copy of a token (from a CI log, a
// compromised step) cannot log in again while the token lives. Memory is
// bounded: at most max live ids, each a few dozen bytes; when that many are
// live, logins are refused (ErrReplayFull), never a live id forgotten. It
// is one proxy's memory: several proxies on one database use SharedReplays
// instead. Safe for concurrent use.
type ReplayCache struct {
	mu   sync.Mutex
	max  int
	seen map[string]time.Time
	exp  expiryHeap
}

// DefaultReplayMax bounds a ReplayCache made with max <= 0: 65,536 ids, a
// few MiB, far above the keyless logins any CI makes within a token's
// lifetime (minutes).
const DefaultReplayMax = 1 << 16

// NewReplayCache remembers at most max live ids (DefaultReplayMax if max <= 0).
func NewReplayCache(max int) *ReplayCache {
	if max <= 0 {
		max = DefaultReplayMax
	}
	return &ReplayCache{max: max, seen: map[string]time.Time{}}
}

// Use records the token id key (the issuer's name and the jti: ids are
// unique per issuer only), valid until expiry, at now. It returns
// ErrReplayed when key is remembered and has not expired, ErrReplayFull
// when no room is left.
func (c *ReplayCache) Use(key string, expiry, now time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.exp) > 0 && !c.exp[0].at.After(now) {
		e := heap.Pop(&c.exp).(expiryEntry)
		if at, ok := c.seen[e.key]; ok && at.Equal(e.at) {
			delete(c.seen, e.key)
		}
	}
	if at, ok := c.seen[key]; ok && at.After(now) {
		return ErrReplayed
	}
	if !expiry.After(now) {
		return nil // expired already: the verifier refuses it anyway
	}
	if len(c.seen) >= c.max {
		return ErrReplayFull
	}
	c.seen[key] = expiry
	heap.Push(&c.exp, expiryEntry{key: key, at: expiry})
	return nil
}

// Len is the number of ids remembered.
func (c *ReplayCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

type expiryEntry struct {
	key string
	at  time.Time
}

// expiryHeap orders remembered ids by expiry, soonest first, so that
// forgetting the expired ones costs only their number.
type expiryHeap []expiryEntry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(expiryEntry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
