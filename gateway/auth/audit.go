package auth

import (
	"context"
	"log/slog"
)

// Event is one audited identity event: a login, a refused login, a join
// token created or used, an administrative change. Fields never hold
// secrets (no passwords, no tokens, no keys).
type Event struct {
	// Type is the event name, for example "auth.login" or "token.use".
	Type string
	// Actor is who caused it, as identity.Principal.String shows it, or the
	// name tried for a failed login.
	Actor string
	// Success says whether the action was allowed.
	Success bool
	// Fields are further details (cluster, token id, client address).
	Fields map[string]string
}

// Auditor receives identity events. The audit package satisfies it; an
// error from Emit makes the audited action fail (fail closed).
type Auditor interface {
	Emit(ctx context.Context, e Event) error
}

// SlogAuditor writes events to a slog.Logger; it is the default until the
// audit store is wired in.
type SlogAuditor struct{ Logger *slog.Logger }

// Emit logs e at info level.
func (s SlogAuditor) Emit(ctx context.Context, e Event) error {
	l := s.Logger
	if l == nil {
		l = slog.Default()
	}
	attrs := []any{"type", e.Type, "actor", e.Actor, "success", e.Success}
	for k, v := range e.Fields {
		attrs = append(attrs, k, v)
	}
	l.InfoContext(ctx, "audit", attrs...)
	return nil
}
