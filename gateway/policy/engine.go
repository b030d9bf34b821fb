// Package policy decides, with OPA/Rego, which Kubernetes groups a principal
// may assume on a cluster, which clusters it may reach, and which
// administrative actions it may take. It hides OPA entirely: callers pass
// identity.Principal and Cluster values and get plain Go values back.
//
// Policy comes from the default bundle compiled into the binary or from an
// OPA bundle service (polled with ETag, signature-verified, last good bundle
// persisted). A new bundle is compiled, validated and probed before it is
// swapped in atomically; decisions in flight keep the snapshot they started
// with, and a refused bundle leaves the active one answering.
package policy

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/scope"
)

// Engine answers policy decisions. It is safe for concurrent use.
type Engine struct {
	opts   Options
	log    *slog.Logger
	active atomic.Pointer[snapshot]

	mu     sync.Mutex // guards status, etag and floor
	status Status
	etag   string
	// floor is the newest bundle verified from the service or the persist
	// directory: a bundle may only follow it (checkOrder).
	floor *mark

	refreshMu sync.Mutex // one Refresh at a time: check and activate are one step

	runMu  sync.Mutex // guards cancel and done
	cancel context.CancelFunc
	done   chan struct{}
}

// Decision is the answer to Groups and Explain.
type Decision struct {
	// Groups are the Kubernetes groups granted, sorted; empty means denied.
	Groups []string
	// Revision is the bundle revision that decided.
	Revision string
	// Roles maps each granting role to its groups (Explain only).
	Roles map[string][]string
	// Cached says the decision came from the cache of the active bundle's
	// decisions (Groups only), for traces.
	Cached bool
	// Scope is the client's compiled scope from the same bundle (Groups
	// only); nil, allowing nothing, for a client the policy does not
	// register.
	Scope *scope.Scope
}

// New validates opts and builds an engine. The embedded default or a static
// bundle is active on return. With a bundle service, the last good bundle
// persisted in PersistDir is activated if there is one; otherwise decisions
// fail with ErrUnavailable until Run or Refresh activates a bundle.
func New(ctx context.Context, opts Options) (*Engine, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("policy configuration: %w", err)
	}
	e := &Engine{opts: opts, log: opts.Logger.With("component", "policy")}
	e.status = Status{Source: opts.Source(), URL: opts.BundleURL}
	switch opts.Source() {
	case SourceEmbedded:
		c, err := embeddedContent()
		if err != nil {
			return nil, fmt.Errorf("embedded policy: %w", err)
		}
		if err := e.activate(ctx, c, nil); err != nil {
			return nil, fmt.Errorf("embedded policy (a build problem: run make opa-test): %w", err)
		}
	case SourceStatic:
		c, err := readBundle(opts.Bundle, opts.verifier(), opts.MaxBundleBytes)
		if err == nil {
			err = e.activate(ctx, c, nil)
		}
		if err != nil {
			return nil, err
		}
	case SourceService:
		e.loadRefusals()
		e.loadPersisted(ctx)
	}
	return e, nil
}

// activate compiles c and swaps it in. raw, when set, is persisted once
// the bundle is active.
func (e *Engine) activate(ctx context.Context, c content, raw []byte) error {
	s, err := compile(ctx, c, e.opts.CacheEntries)
	if err != nil {
		err = &refusal{reason: ReasonInvalid, revision: c.revision, err: err}
		e.recordError(err)
		e.log.Warn("policy bundle refused; the active bundle stays", "revision", c.revision, "error", err)
		return err
	}
	s.activated, s.mark = time.Now(), c.mark
	prev := e.active.Swap(s)
	e.mu.Lock()
	e.status.Revision, e.status.ActivatedAt = s.revision, s.activated
	e.status.FastPathOff = s.fastOff
	if c.mark != nil && (e.floor == nil || c.mark.n >= e.floor.n) {
		e.floor = c.mark
	}
	e.mu.Unlock()
	e.raiseShared(ctx, c.mark)
	if raw != nil {
		e.persist(raw)
	}
	e.saveStatus()
	old := ""
	if prev != nil {
		old = prev.revision
	}
	e.log.Info("policy bundle activated", "revision", s.revision, "previous", old, "source", e.opts.Source())
	if s.fast == nil {
		e.log.Warn("policy fast path off for this revision: every uncached decision is a full Rego evaluation (correct, but hundreds of µs)",
			"revision", s.revision, "reason", s.fastOff)
	}
	return nil
}

func (e *Engine) snapshot() (*snapshot, error) {
	s := e.active.Load()
	if s == nil {
		return nil, fmt.Errorf("%w: no bundle has been activated yet (%s)", ErrUnavailable, e.Status().describeWait())
	}
	return s, nil
}

// Groups returns the groups p may assume on c, and the deciding revision.
func (e *Engine) Groups(ctx context.Context, p identity.Principal, c Cluster) (Decision, error) {
	s, err := e.snapshot()
	if err != nil {
		return Decision{}, err
	}
	sc, registered := s.scopes.Client(p.ClientID)
	if !registered {
		// A credential naming no client, or one the policy does not
		// register, gets nothing: never another client's groups.
		return Decision{Revision: s.revision}, nil
	}
	var requested []string
	if len(p.Requests) > 0 {
		requested = p.ActiveRoles(c.Name, time.Now())
	}
	var buf [256]byte
	key := appendCacheKey(buf[:0], p, c, requested)
	if g, ok := s.cache.get(key); ok {
		return Decision{Groups: slices.Clone(g), Revision: s.revision, Cached: true, Scope: sc}, nil
	}
	if err := checkInput(p, c); err != nil {
		return Decision{}, err
	}
	good, bad, err := s.decideGroups(ctx, p, c, requested)
	if err != nil {
		return Decision{}, err
	}
	if len(bad) > 0 {
		e.log.Warn("policy granted invalid groups; dropped", "principal", p.String(), "cluster", c.Name, "groups", bad, "revision", s.revision)
	}
	s.cache.put(key, good)
	return Decision{Groups: slices.Clone(good), Revision: s.revision, Scope: sc}, nil
}

// Scope returns a client's compiled scope from the active bundle and its
// revision; ok is false for a client the policy does not register. The
// worker matches each request against it again, from its own policy.
func (e *Engine) Scope(client string) (sc *scope.Scope, ok bool, revision string, err error) {
	s, err := e.snapshot()
	if err != nil {
		return nil, false, "", err
	}
	sc, ok = s.scopes.Client(client)
	return sc, ok, s.revision, nil
}

func checkInput(p identity.Principal, c Cluster) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidInput, err)
	}
	return c.validate()
}

// AllowGroups returns the subset of groups that policy still grants p on c,
// in the order given: the worker's group-by-group re-check of a grant.
func (e *Engine) AllowGroups(ctx context.Context, p identity.Principal, c Cluster, groups []string) ([]string, string, error) {
	d, err := e.Groups(ctx, p, c)
	if err != nil {
		return nil, "", err
	}
	allowed := make([]string, 0, len(groups))
	for _, g := range groups {
		if _, ok := slices.BinarySearch(d.Groups, g); ok && !slices.Contains(allowed, g) {
			allowed = append(allowed, g)
		}
	}
	return allowed, d.Revision, nil
}

// Explain is Groups plus the roles that granted each group, for
// `limen policy eval`. It is not cached.
func (e *Engine) Explain(ctx context.Context, p identity.Principal, c Cluster) (Decision, error) {
	d, err := e.Groups(ctx, p, c)
	if err != nil {
		return d, err
	}
	s, err := e.snapshot()
	if err != nil || s.grants == nil {
		return d, err
	}
	rs, err := s.grants.Eval(ctx, rego.EvalParsedInput(groupsInput(p, c, p.ActiveRoles(c.Name, time.Now()))))
	if err != nil {
		return d, fmt.Errorf("%w: evaluate %s: %v", ErrUnavailable, queryGrants, err)
	}
	d.Roles = map[string][]string{}
	if len(rs) > 0 && len(rs[0].Expressions) > 0 {
		m, _ := rs[0].Expressions[0].Value.(map[string]any)
		for role, v := range m {
			gs, _ := v.([]any)
			for _, g := range gs {
				if s, ok := g.(string); ok && validGroup(s) {
					d.Roles[role] = append(d.Roles[role], s)
				}
			}
			slices.Sort(d.Roles[role])
		}
	}
	return d, nil
}

// Clusters returns the names, among candidates, on which p may assume at
// least one group, sorted.
func (e *Engine) Clusters(ctx context.Context, p identity.Principal, candidates []Cluster) ([]string, error) {
	s, err := e.snapshot()
	if err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidInput, err)
	}
	for _, c := range candidates {
		if err := c.validate(); err != nil {
			return nil, err
		}
	}
	rs, err := s.clusters.Eval(ctx, rego.EvalParsedInput(clustersInput(p, candidates)))
	if err != nil {
		return nil, fmt.Errorf("%w: evaluate %s: %v", ErrUnavailable, queryClusters, err)
	}
	names, err := stringsResult(rs)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnavailable, queryClusters, err)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// AdminAllow reports whether p may perform the administrative action.
func (e *Engine) AdminAllow(ctx context.Context, p identity.Principal, action string) (bool, error) {
	s, err := e.snapshot()
	if err != nil {
		return false, err
	}
	if err := p.Validate(); err != nil {
		return false, fmt.Errorf("%w: %v", ErrInvalidInput, err)
	}
	if action == "" || len(action) > identity.MaxNameLen || !printable(action) {
		return false, fmt.Errorf("%w: admin action %q is empty, too long or not printable", ErrInvalidInput, action)
	}
	rs, err := s.admin.Eval(ctx, rego.EvalParsedInput(adminInput(p, action)))
	if err != nil {
		return false, fmt.Errorf("%w: evaluate %s: %v", ErrUnavailable, queryAdmin, err)
	}
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return false, nil
	}
	allow, ok := rs[0].Expressions[0].Value.(bool)
	if !ok {
		return false, fmt.Errorf("%w: %s is %T, want a boolean", ErrUnavailable, queryAdmin, rs[0].Expressions[0].Value)
	}
	return allow, nil
}
