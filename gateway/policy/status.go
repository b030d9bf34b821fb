package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Status describes the engine's policy for metrics and `limen policy status`.
type Status struct {
	// Source is SourceEmbedded, SourceService or SourceStatic.
	Source string `json:"source"`
	// URL is the bundle service resource, if any.
	URL string `json:"url,omitempty"`
	// Revision is the active bundle's revision; empty when none is active.
	Revision string `json:"revision,omitempty"`
	// ActivatedAt is when the active bundle was activated.
	ActivatedAt time.Time `json:"activated_at,omitzero"`
	// LastFetch is the last successful fetch (a new bundle or 304 Not Modified).
	LastFetch time.Time `json:"last_fetch,omitzero"`
	// LastError is the last fetch or activation failure, cleared by the next success.
	LastError string `json:"last_error,omitempty"`
	// LastErrorAt is when LastError happened.
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
	// Refused counts bundles refused since start.
	Refused int `json:"refused"`
}

// Status returns a copy of the current status.
func (e *Engine) Status() Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.status
}

func (s Status) describeWait() string {
	if s.LastError != "" {
		return "last error: " + s.LastError
	}
	if s.Source == SourceService {
		return "waiting for the first bundle from " + s.URL
	}
	return "source " + s.Source
}

func (e *Engine) recordError(err error) {
	e.mu.Lock()
	e.status.LastError, e.status.LastErrorAt = err.Error(), time.Now()
	if errors.Is(err, ErrBundleRefused) {
		e.status.Refused++
	}
	e.mu.Unlock()
	e.saveStatus()
}

func (e *Engine) recordFetch() {
	e.mu.Lock()
	e.status.LastFetch = time.Now()
	e.status.LastError, e.status.LastErrorAt = "", time.Time{}
	e.mu.Unlock()
	e.saveStatus()
}

// Persisted file names in Options.PersistDir.
const (
	bundleFile = "bundle.tar.gz"
	statusFile = "status.json"
)

// saveStatus writes status.json so that `limen policy status` can show a
// running process's view. Failures are logged, never fatal.
func (e *Engine) saveStatus() {
	if e.opts.PersistDir == "" {
		return
	}
	b, err := json.MarshalIndent(e.Status(), "", "  ")
	if err == nil {
		err = writeFileAtomic(filepath.Join(e.opts.PersistDir, statusFile), append(b, '\n'))
	}
	if err != nil {
		e.log.Warn("policy status not saved", "dir", e.opts.PersistDir, "error", err)
	}
}

// ReadStatus reads the status a running engine saved in persistDir.
func ReadStatus(persistDir string) (Status, error) {
	var s Status
	b, err := os.ReadFile(filepath.Join(persistDir, statusFile))
	if err != nil {
		return s, fmt.Errorf("read policy status: %w (is policy-persist-dir the running process's?)", err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("policy status %s: %w", filepath.Join(persistDir, statusFile), err)
	}
	return s, nil
}

func writeFileAtomic(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
