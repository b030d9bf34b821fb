package grant

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/limenhq/limen/gateway/identity"
)

// DefaultReuse is how long a Signer hands out the same signed grant.
const DefaultReuse = time.Minute

// maxCached bounds each cache; past it, stale entries go, then all of them.
const maxCached = 4096

// Signer signs grants for the proxy, reusing a grant it signed less than
// Reuse ago for the same principal (login id included), cluster, groups and
// policy revision.
//
// What a reused grant can and cannot do:
//   - It allows exactly what a fresh one would: the same principal, groups
//     and cluster. A change of the policy (its revision) or of the groups
//     signs a new grant.
//   - It never outlives the client certificate of the request it is used
//     for: a grant whose expiry is later than that certificate's is not
//     reused.
//   - A lock refuses it at once: both hops check the principal's lock on
//     every request, whatever grant it carries, and the worker re-checks
//     the groups against its own policy.
//   - It shortens a stream's life by at most Reuse: a stream ends when its
//     grant expires, and a reused grant was issued up to Reuse earlier.
//   - Replayed on a tunnel stream it yields no more than the proxy, which
//     alone can open those streams, would grant anyway until it expires;
//     each stream's session id and client address travel beside it
//     (Request), not in it.
type Signer struct {
	Key ed25519.PrivateKey
	// Reuse is how long a signed grant is reused; 0 is DefaultReuse, and a
	// negative value signs every grant afresh.
	Reuse time.Duration

	mu    sync.Mutex
	cache map[string]signed
}

type signed struct {
	token []byte
	grant Grant
}

// Sign returns a token for g (its IssuedAt and ExpiresAt set by the
// caller; ExpiresAt no later than certExpiry), or a reused one for the
// same decision: same principal, cluster, groups and revision, issued less
// than Reuse before g.IssuedAt, expiring no later than certExpiry.
func (s *Signer) Sign(g Grant, revision string, certExpiry time.Time) ([]byte, Grant, error) {
	reuse := s.Reuse
	if reuse == 0 {
		reuse = DefaultReuse
	}
	key, err := decisionKey(g.Principal, g.Cluster, g.Groups, revision, g.Purpose)
	if err != nil {
		return nil, Grant{}, err
	}
	now := g.IssuedAt
	if reuse > 0 {
		s.mu.Lock()
		c, ok := s.cache[key]
		s.mu.Unlock()
		if ok && now.Sub(c.grant.IssuedAt) < reuse && !now.Before(c.grant.IssuedAt) &&
			!c.grant.ExpiresAt.After(certExpiry) && now.Before(c.grant.ExpiresAt) {
			g := c.grant
			g.Groups = slices.Clone(g.Groups)
			return c.token, g, nil
		}
	}
	token, err := Sign(s.Key, g)
	if err != nil {
		return nil, Grant{}, err
	}
	g.Version = Version
	g.Groups = slices.Compact(slices.Sorted(slices.Values(g.Groups)))
	g.IssuedAt, g.ExpiresAt = g.IssuedAt.UTC().Round(0), g.ExpiresAt.UTC().Round(0)
	if reuse > 0 {
		s.mu.Lock()
		if s.cache == nil {
			s.cache = map[string]signed{}
		}
		if len(s.cache) >= maxCached {
			for k, c := range s.cache {
				if now.Sub(c.grant.IssuedAt) >= reuse {
					delete(s.cache, k)
				}
			}
			if len(s.cache) >= maxCached {
				clear(s.cache)
			}
		}
		s.cache[key] = signed{token, g}
		g.Groups = slices.Clone(g.Groups)
		s.mu.Unlock()
	}
	return token, g, nil
}

// decisionKey names one decision: the whole principal, as its JSON (every
// field, so that a field added to Principal can never be left out of the
// key), then the cluster, the groups, the revision and the purpose. JSON
// escapes every control byte and no other part holds a NUL, so the parts
// cannot run into each other.
//
// The principal's login id is part of it: a grant carries the principal
// into every audit event of the requests it covers, so a grant reused for
// another login of the same person would name that other login.
func decisionKey(p identity.Principal, cluster string, groups []string, revision, purpose string) (string, error) {
	pj, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("grant cache key of %s: %w", p, err)
	}
	gs := slices.Compact(slices.Sorted(slices.Values(groups)))
	return string(pj) + "\x00" + cluster + "\x00" + strings.Join(gs, "\x01") + "\x00" + revision + "\x00" + purpose, nil
}

// Verifier verifies grants for the worker, checking each distinct token's
// signature once: a token it verified before is looked up by its SHA-256
// and only its time and cluster are checked again (they change with the
// clock, the signature does not). Refused tokens are never cached.
type Verifier struct {
	Key     ed25519.PublicKey
	Cluster string

	mu    sync.Mutex
	cache map[[sha256.Size]byte]Grant
}

// Verify is grant.Verify with the cache.
func (v *Verifier) Verify(token []byte, now time.Time) (Grant, error) {
	if len(token) > MaxTokenSize {
		return Verify(v.Key, token, v.Cluster, now) // refused, with the reason
	}
	sum := sha256.Sum256(token)
	v.mu.Lock()
	g, ok := v.cache[sum]
	v.mu.Unlock()
	if ok {
		if err := g.check(v.Cluster, now); err != nil {
			return Grant{}, fmt.Errorf("verify grant of %s: %w", g.Principal, err)
		}
		g.Groups = slices.Clone(g.Groups)
		return g, nil
	}
	g, err := Verify(v.Key, token, v.Cluster, now)
	if err != nil {
		return Grant{}, err
	}
	v.mu.Lock()
	if v.cache == nil {
		v.cache = map[[sha256.Size]byte]Grant{}
	}
	if len(v.cache) >= maxCached {
		for k, c := range v.cache {
			if !now.Before(c.ExpiresAt) {
				delete(v.cache, k)
			}
		}
		if len(v.cache) >= maxCached {
			clear(v.cache)
		}
	}
	v.cache[sum] = g
	v.mu.Unlock()
	g.Groups = slices.Clone(g.Groups)
	return g, nil
}
