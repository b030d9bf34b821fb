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
