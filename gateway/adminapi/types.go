package adminapi

import (
	"github.com/limenhq/limen/gateway/locks"
)

// Paths the handler serves; Register mounts them on the proxy's mux.
const (
	PathLocks    = "/v1/admin/locks"
	PathSessions = "/v1/admin/sessions"
)

// Admin actions passed to AdminAllow (data.limen.admin.allow).
const (
	ActionLock         = "user.lock"
	ActionUnlock       = "user.unlock"
	ActionLocksList    = "locks.list"
	ActionSessionsList = "sessions.list"
	ActionSessionKill  = "session.kill"
)

// LockRequest is posted to PathLocks.
type LockRequest struct {
	Target locks.Target `json:"target"`
	Reason string       `json:"reason"`
	// TTL, when set ("1h"), makes the lock lapse after that long.
	TTL string `json:"ttl,omitempty"`
}
