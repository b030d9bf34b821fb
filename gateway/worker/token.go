package worker

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// TokenFile reads a ServiceAccount token from a file (a projected volume
// that the kubelet rotates) and re-reads it about once a minute. A missing or
// unreadable file is an error on every call until it is readable again, so
// the worker answers 503 instead of forwarding with a stale identity.
type TokenFile struct {
	Path    string
	Refresh time.Duration // zero means one minute
	Now     func() time.Time

	mu      sync.Mutex
	token   string
	readAt  time.Time
	lastErr error
}

// Token returns the current token.
func (t *TokenFile) Token() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now
	if t.Now != nil {
		now = t.Now
	}
	refresh := t.Refresh
	if refresh <= 0 {
		refresh = time.Minute
	}
	if t.lastErr == nil && t.token != "" && now().Sub(t.readAt) < refresh {
		return t.token, nil
	}
	b, err := os.ReadFile(t.Path)
	if err == nil && strings.TrimSpace(string(b)) == "" {
		err = errors.New("file is empty")
	}
	t.readAt, t.lastErr = now(), err
	if err != nil {
		t.token = ""
		return "", fmt.Errorf("read ServiceAccount token %s: %w", t.Path, err)
	}
	t.token = strings.TrimSpace(string(b))
	return t.token, nil
}

// Refused tells the TokenFile that the API server refused tok (401): if it
// is the token in use, the next Token reads the file again at once, so that
// a rotated file is taken without waiting for the timed re-read.
func (t *TokenFile) Refused(tok string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tok != "" && tok == t.token {
		t.readAt = time.Time{}
	}
}
