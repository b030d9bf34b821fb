package store

import (
	"cmp"
	"context"
	"slices"
	"sync"
)

// MemorySignIns are sign-ins kept in memory: the embedded engine's, since
// one proxy is their only reader; a restart signs everyone out, which a
// short-lived sign-in makes cheap. (PostgreSQL shares them between proxies.)
type MemorySignIns struct {
	mu sync.Mutex
	m  map[string]SignInRecord
}

// NewMemorySignIns returns an empty set of sign-ins.
func NewMemorySignIns() *MemorySignIns { return &MemorySignIns{m: map[string]SignInRecord{}} }

func (s *MemorySignIns) Put(_ context.Context, r SignInRecord, _ int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[r.Digest] = r
	return nil
}

func (s *MemorySignIns) Get(_ context.Context, digest string, nowNS int64) (SignInRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range s.m {
		if v.Expires <= nowNS {
			delete(s.m, k)
		}
	}
	r, ok := s.m[digest]
	if !ok {
		return r, ErrNotFound
	}
	return r, nil
}

func (s *MemorySignIns) Delete(_ context.Context, digest string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, digest)
	return nil
}

// Close keeps the sign-ins: the Backend's set outlives one handler.
func (s *MemorySignIns) Close() error { return nil }

// MemoryPolicy is a policy floor and refusals kept in memory: the embedded
// engine's, since one proxy is their only reader and its policy directory
// persists both already (policy-persist-dir).
type MemoryPolicy struct {
	mu       sync.Mutex
	floor    *FloorRecord
	refusals []RefusalRecord
}

// NewMemoryPolicy returns an empty floor.
func NewMemoryPolicy() *MemoryPolicy { return &MemoryPolicy{} }

func (p *MemoryPolicy) Floor(context.Context) (FloorRecord, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.floor == nil {
		return FloorRecord{}, false, nil
	}
	return *p.floor, true, nil
}

func (p *MemoryPolicy) RaiseFloor(_ context.Context, f FloorRecord) (FloorRecord, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.floor == nil || p.floor.Key < f.Key {
		c := f
		c.Digest = append([]byte(nil), f.Digest...)
		p.floor = &c
	}
	return *p.floor, nil
}

func (p *MemoryPolicy) AddRefusal(_ context.Context, r RefusalRecord) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refusals = append(p.refusals, r)
	return nil
}

func (p *MemoryPolicy) Refusals(_ context.Context, limit int) ([]RefusalRecord, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []RefusalRecord
	for i := len(p.refusals) - 1; i >= 0 && len(out) < limit; i-- {
		out = append(out, p.refusals[i])
	}
	return out, nil
}

// Close keeps the floor: the Backend's outlives one engine.
func (p *MemoryPolicy) Close() error { return nil }

// MemorySessions is the embedded engine's session directory, in memory:
// one proxy's registry is every session already, so the directory only
// has to answer like the shared one. It keeps the live sessions and the
// newest MemoryEnded ended ones.
type MemorySessions struct {
	mu sync.Mutex
	m  map[string]SessionRecord
}

// MemoryEnded is how many ended sessions MemorySessions keeps.
const MemoryEnded = 256

// NewMemorySessions returns an empty directory.
func NewMemorySessions() *MemorySessions { return &MemorySessions{m: map[string]SessionRecord{}} }

func (d *MemorySessions) Put(_ context.Context, r SessionRecord) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	old, ok := d.m[r.ID]
	if ok && old.EndNS != 0 {
		return nil // an end never turns back into a live session
	}
	r.KillBy = old.KillBy
	d.m[r.ID] = r
	if r.EndNS != 0 {
		var ended []SessionRecord
		for _, x := range d.m {
			if x.EndNS != 0 {
				ended = append(ended, x)
			}
		}
		if len(ended) > MemoryEnded {
			slices.SortFunc(ended, func(a, b SessionRecord) int { return cmp.Compare(b.EndNS, a.EndNS) })
			for _, x := range ended[MemoryEnded:] {
				delete(d.m, x.ID)
			}
		}
	}
	return nil
}

func (d *MemorySessions) List(_ context.Context, limit int) ([]SessionRecord, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]SessionRecord, 0, len(d.m))
	for _, x := range d.m {
		out = append(out, x)
	}
	slices.SortFunc(out, func(a, b SessionRecord) int {
		return cmp.Or(cmp.Compare(b.StartNS, a.StartNS), cmp.Compare(a.ID, b.ID))
	})
	return out[:min(len(out), max(limit, 1))], nil
}

func (d *MemorySessions) Get(_ context.Context, id string) (SessionRecord, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.m[id]
	if !ok {
		return r, ErrNotFound
	}
	return r, nil
}

// RequestKill marks a live session. The embedded engine has no Feed: its
// one proxy kills its own sessions without asking the directory.
func (d *MemorySessions) RequestKill(_ context.Context, id, by string) (SessionRecord, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.m[id]
	if !ok || r.EndNS != 0 {
		return SessionRecord{}, ErrNotFound
	}
	r.KillBy = by
	d.m[id] = r
	return r, nil
}

// Close keeps the directory: the Backend's outlives one registry.
func (d *MemorySessions) Close() error { return nil }
