package policy

import "errors"

// Sentinel errors. Callers map them to status codes in one place:
// ErrUnavailable → 503 (operator problem), ErrInvalidInput → 403.
var (
	// ErrUnavailable means no policy is active yet or evaluation failed;
	// nothing may be granted until it is fixed.
	ErrUnavailable = errors.New("policy unavailable")
	// ErrInvalidInput means the principal or cluster is malformed; such a
	// caller is never granted anything.
	ErrInvalidInput = errors.New("invalid policy input")
	// ErrBundleRefused means a bundle failed verification, compilation or
	// the activation checks; the active bundle (if any) is unchanged.
	ErrBundleRefused = errors.New("bundle refused")
)
