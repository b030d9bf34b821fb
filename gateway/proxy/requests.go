package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/requestapi"
	"github.com/limenhq/limen/gateway/requests"
)

// ElevationChecker confirms, on every request that would use it, that an
// access request a credential carries is still approved and unexpired
// (requests.Service.Check).
type ElevationChecker interface {
	Check(ctx context.Context, p identity.Principal, e identity.Elevation) error
}

// RequestSweepInterval is how often the proxy ends expired access
// requests in the store (each audited access.expire once). Access itself
// ends at the second of expiry whatever the sweep: every hop checks the
// expiry it carries.
const RequestSweepInterval = time.Second

// openRequests builds the access-request service on the store and mounts
// its API; Kube re-checks carried requests against it.
func (s *Server) openRequests(ctx context.Context, c Config) error {
	rdb, err := s.store.Requests(ctx)
	if err != nil {
		return fmt.Errorf("access request store: %w", err)
	}
	s.Requests = &requests.Service{Store: rdb, Policy: s.Policy, Audit: s.Denials, Now: c.Now,
		Clusters: s.Kube.Clusters, Logger: s.log.With("component", "requests")}
	api, err := requestapi.New(requestapi.Config{Requests: s.Requests, CA: s.CA, Locks: s.LockSet, Admin: s.Policy,
		Audit: s.Denials, Now: c.Now, Logger: s.log.With("component", "requests"), Clusters: knownNames(c)})
	if err != nil {
		return err
	}
	api.Register(s.Mux)
	s.Kube.Elevations, s.Kube.Requestable = s.Requests, s.Requests
	return nil
}

// elevate returns p with only the access requests it carries for cluster
// that the store confirms, and their earliest expiry (zero with none). A
// request the store does not confirm (expired, unknown, another's) is
// dropped, not refused: the principal keeps its standing access.
func (k *Kube) elevate(r *http.Request, p identity.Principal, cluster string, now time.Time) (identity.Principal, time.Time, error) {
	if len(p.Requests) == 0 {
		return p, time.Time{}, nil
	}
	var keep []identity.Elevation
	var until time.Time
	for _, e := range p.Requests {
		if e.Cluster != cluster || !now.Before(e.Expires) {
			continue
		}
		if k.Elevations == nil {
			continue
		}
		if err := k.Elevations.Check(r.Context(), p.WithoutRequests(), e); err != nil {
			if isUnavailable(err) {
				return p, time.Time{}, err
			}
			k.Logger.InfoContext(r.Context(), "access request not honoured", "request", e.Request, "user", p.String(), "reason", err)
			continue
		}
		keep = append(keep, e)
		if until.IsZero() || e.Expires.Before(until) {
			until = e.Expires
		}
	}
	p.Requests = keep
	return p, until, nil
}

func isUnavailable(err error) bool { return errors.Is(err, requests.ErrUnavailable) }

// decideElevated is the policy decision for an elevated principal: when
// its requests add no group to what it holds anyway, the decision without
// them, so that the grant does not carry (and end with) a request it does
// not need. used says whether they add groups.
func (k *Kube) decideElevated(ctx context.Context, p identity.Principal, c policy.Cluster) (policy.Decision, identity.Principal, bool, error) {
	dec, err := k.Policy.Groups(ctx, p, c)
	if err != nil || len(p.Requests) == 0 {
		return dec, p, false, err
	}
	plain := p.WithoutRequests()
	base, err := k.Policy.Groups(ctx, plain, c)
	if err != nil {
		return dec, p, false, err
	}
	if len(dec.Groups) == len(base.Groups) {
		return base, plain, false, nil
	}
	return dec, p, true, nil
}

// usedRequests remembers the requests this proxy audited access.use for.
type usedRequests struct {
	mu   sync.Mutex
	seen map[string]time.Time // request id → its expiry
}

// first reports whether id is used for the first time here, forgetting
// those expired.
func (u *usedRequests) first(id string, expires, now time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.seen == nil {
		u.seen = map[string]time.Time{}
	}
	if _, ok := u.seen[id]; ok {
		return false
	}
	for k, exp := range u.seen {
		if !now.Before(exp) {
			delete(u.seen, k)
		}
	}
	u.seen[id] = expires
	return true
}

// auditUse records access.use for each request p's credential carries the
// first time this proxy relays a request that needs it.
func (k *Kube) auditUse(r *http.Request, p identity.Principal, cluster string, groups []string, now time.Time) {
	for _, e := range p.Requests {
		if !k.used.first(e.Request, e.Expires, now) {
			continue
		}
		ev := audit.Event{Type: audit.TypeAccessUse, Time: now, Principal: p, Cluster: cluster, Groups: groups, ClientAddr: r.RemoteAddr,
			Fields: map[string]string{"request": e.Request, "role": e.Role, "expires": e.Expires.UTC().Format(time.RFC3339)}}
		if err := k.Audit.Emit(r.Context(), ev); err != nil {
			k.Logger.ErrorContext(r.Context(), "audit access.use", "err", err)
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// Requester answers which roles a principal may request on a cluster, for
// the refusal's hint (requests.Service.Requestable).
type Requester interface {
	Requestable(ctx context.Context, p identity.Principal, cluster string) (map[string]policy.RequestTerms, error)
}

// requestHint is the refusal's suffix naming the roles p could request on
// cluster and the command, "" when there are none or policy cannot say. The
// cluster is named as the user typed it; the hint is given only for roles
// policy offers, so it tells an outsider nothing the policy did not mean
// them to know.
func (k *Kube) requestHint(r *http.Request, p identity.Principal, cluster string) string {
	if k.Requestable == nil {
		return ""
	}
	roles, err := k.Requestable.Requestable(r.Context(), p.WithoutRequests(), cluster)
	if err != nil || len(roles) == 0 {
		return ""
	}
	return "; you may request access: " + RequestCommands(cluster, roles)
}

// RequestCommands lists the limen request commands for roles on cluster,
// the reason flag where it is required, in role order.
func RequestCommands(cluster string, roles map[string]policy.RequestTerms) string {
	names := make([]string, 0, len(roles))
	for n := range roles {
		names = append(names, n)
	}
	slices.Sort(names)
	var b strings.Builder
	for i, n := range names {
		t := roles[n]
		if i > 0 {
			b.WriteString(", or ")
		}
		fmt.Fprintf(&b, "limen request %s --cluster %s --for %s", n, cluster, shortDuration(t.MaxDuration))
		if t.ReasonRequired {
			b.WriteString(` --reason "..."`)
		}
		fmt.Fprintf(&b, " (at most %s, %d approval", shortDuration(t.MaxDuration), t.Approvals)
		if t.Approvals != 1 {
			b.WriteString("s")
		}
		b.WriteString(")")
	}
	return b.String()
}

// shortDuration prints 1h rather than 1h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	s = strings.TrimSuffix(s, "0s")
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	if s == "" {
		return "0s"
	}
	return s
}

// endRequestsOnLock ends the access requests of a principal just locked:
// the lock refuses everything while it holds, and its requests stay ended
// after an unlock.
func (s *Server) endRequestsOnLock(ctx context.Context, ch locks.Change) {
	if ch.Op != locks.OpSet || s.Requests == nil {
		return
	}
	p, err := ch.Lock.Target.Principal()
	if err != nil {
		return
	}
	if _, err := s.Requests.EndFor(ctx, p, "locked: "+ch.Lock.Reason); err != nil {
		s.log.Error("end the access requests of a locked principal", "target", ch.Lock.Target.String(), "err", err)
	}
}

// knownNames are the configured cluster names, --clusters then
// --cluster-label's, each once.
func knownNames(c Config) []string {
	names := slices.Clone(c.Clusters)
	for n := range c.ClusterLabels {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}
