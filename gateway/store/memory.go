package store

import (
	"context"
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
