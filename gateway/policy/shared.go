package policy

import (
	"context"
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/limenhq/limen/gateway/store"
)

// The revision floor several proxies share (Options.Shared): a bundle
// service may only move the revision forward, and that holds for the
// deployment, not for each proxy alone. A proxy reads the shared floor
// before it activates a pulled bundle (one older than what any proxy has
// verified is refused, as a rollback), raises it after each activation,
// and stores each refusal where every proxy's status can show it. When the
// shared floor cannot be read, no new bundle is activated: the active one
// stays (fail closed).

// floorKey is revision n zero-padded to 20 digits: keys order as numbers.
func floorKey(n uint64) string { return fmt.Sprintf("%020d", n) }

// sharedFloor returns the newer of local and the shared floor.
func (e *Engine) sharedFloor(ctx context.Context, local *mark) (*mark, error) {
	if e.opts.Shared == nil {
		return local, nil
	}
	f, ok, err := e.opts.Shared.Floor(ctx)
	if err != nil {
		return nil, &refusal{reason: ReasonFetch, err: fmt.Errorf("%w: the shared revision floor cannot be read, so no bundle is activated: %w", ErrUnavailable, err)}
	}
	if !ok {
		return local, nil
	}
	n, err := ParseRevision(f.Revision)
	if err != nil || len(f.Digest) != sha256.Size {
		return nil, &refusal{reason: ReasonBadRevision, err: fmt.Errorf("%w: the shared revision floor %q is corrupt", ErrBundleRefused, f.Revision)}
	}
	if local != nil && local.n >= n {
		return local, nil
	}
	m := &mark{revision: f.Revision, n: n}
	copy(m.digest[:], f.Digest)
	return m, nil
}

// raiseShared raises the shared floor to m, once m is active here.
func (e *Engine) raiseShared(ctx context.Context, m *mark) {
	if e.opts.Shared == nil || m == nil || e.opts.Source() != SourceService {
		return
	}
	if _, err := e.opts.Shared.RaiseFloor(ctx, store.FloorRecord{Revision: m.revision, Key: floorKey(m.n), Digest: m.digest[:]}); err != nil {
		e.log.Warn("shared policy revision floor not raised; other proxies still refuse older bundles by their own floor", "revision", m.revision, "error", err)
	}
}

// shareRefusal stores r where every proxy's status shows it.
func (e *Engine) shareRefusal(r Refusal) {
	if e.opts.Shared == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := e.opts.Shared.AddRefusal(ctx, store.RefusalRecord{TimeNS: r.At.UnixNano(), Reason: r.Reason, Revision: r.Revision,
		Unverified: r.Unverified, Active: r.Active, Error: r.Error, ProxyID: e.opts.ProxyID})
	if err != nil {
		e.log.Warn("policy refusal not stored in the shared store", "error", err)
	}
}

// SharedRefusals returns the newest limit refusals of every proxy on the
// shared store, newest first; none without one.
func (e *Engine) SharedRefusals(ctx context.Context, limit int) ([]Refusal, error) {
	if e.opts.Shared == nil {
		return nil, nil
	}
	recs, err := e.opts.Shared.Refusals(ctx, limit)
	if err != nil {
		return nil, fmt.Errorf("shared policy refusals: %w", err)
	}
	out := make([]Refusal, 0, len(recs))
	for _, r := range recs {
		at := time.Unix(0, r.TimeNS)
		out = append(out, Refusal{Reason: r.Reason, Revision: r.Revision, Unverified: r.Unverified, Active: r.Active,
			Error: r.Error, At: at, First: at, Count: 1, Proxy: r.ProxyID})
	}
	return out, nil
}

// SourceShared is the Source of SharedStatus: the deployment's floor.
const SourceShared = "shared"

// SharedStatus is what the proxies of the shared store agree on: the
// revision floor (as Revision) and the newest refusals of any of them. It
// is the zero Status without a shared store.
func (e *Engine) SharedStatus(ctx context.Context) (Status, error) {
	if e.opts.Shared == nil {
		return Status{}, nil
	}
	f, _, err := e.opts.Shared.Floor(ctx)
	if err != nil {
		return Status{}, fmt.Errorf("shared policy floor: %w", err)
	}
	refusals, err := e.SharedRefusals(ctx, MaxRefusals)
	if err != nil {
		return Status{}, err
	}
	return Status{Source: SourceShared, Revision: f.Revision, Refusals: refusals}, nil
}
