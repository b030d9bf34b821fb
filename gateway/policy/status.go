package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
	// FastPathOff says why the active revision's uncached group decisions
	// are full Rego evaluations instead of lookups in an index of its data
	// (a policy other than Limen's own, or data of a shape the index does
	// not read); empty when the index answers.
	FastPathOff string `json:"fast_path_off,omitempty"`
	// LastFetch is the last successful fetch (a new bundle or 304 Not Modified).
	LastFetch time.Time `json:"last_fetch,omitzero"`
	// LastError is the last fetch or activation failure, cleared by the next success.
	LastError string `json:"last_error,omitempty"`
	// LastErrorAt is when LastError happened.
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
	// Refused counts bundles refused since start.
	Refused int `json:"refused"`
	// Refusals are the latest refused bundles and failed fetches, newest
	// first, at most MaxRefusals; the same refusal repeated by every poll is
	// one entry with a count. They survive a restart with the same
	// persist directory.
	Refusals []Refusal `json:"refusals,omitempty"`
}

// Refusal is one reason a fetched or persisted bundle did not replace the
// active one.
type Refusal struct {
	// Reason is one of the Reason* constants.
	Reason string `json:"reason"`
	// Revision is the refused bundle's revision, when it could be read.
	Revision string `json:"revision,omitempty"`
	// Unverified marks a Revision read from a bundle whose signature failed:
	// only what the bundle claims.
	Unverified bool `json:"unverified,omitempty"`
	// Active is the revision that stayed active; empty when none was.
	Active string `json:"active,omitempty"`
	// Error says what happened and what to do.
	Error string `json:"error"`
	// Proxy names the proxy that refused it, in the shared history.
	Proxy string `json:"proxy,omitempty"`
	// At is the latest occurrence; First the first of Count in a row.
	At    time.Time `json:"at"`
	First time.Time `json:"first"`
	Count int       `json:"count"`
}

// repeats reports whether r is the same refusal as last, happening again.
func (last Refusal) repeats(r Refusal) bool {
	return last.Reason == r.Reason && last.Revision == r.Revision && last.Unverified == r.Unverified &&
		last.Active == r.Active && last.Error == r.Error
}

// MaxRefusals bounds Status.Refusals.
const MaxRefusals = 10

// Refusal reasons.
const (
	// ReasonRollback: the bundle's revision is older than the active or the
	// persisted one.
	ReasonRollback = "rollback"
	// ReasonSameRevision: the bundle has the active or persisted revision
	// but other content (a replay or a forgery of that number).
	ReasonSameRevision = "same-revision-other-content"
	// ReasonSignature: the signature is missing or does not verify.
	ReasonSignature = "bad-signature"
	// ReasonNotHTTPS: the bundle service redirected to a URL that is not https.
	ReasonNotHTTPS = "not-https"
	// ReasonFetch: the bundle service could not be reached or answered an error.
	ReasonFetch = "fetch-error"
	// ReasonBadRevision: the revision is missing or not an unsigned integer.
	ReasonBadRevision = "bad-revision"
	// ReasonInvalid: the bundle is malformed or fails the activation checks
	// (compilation, data validation, system: groups).
	ReasonInvalid = "invalid-bundle"
)

// refusal is an error that carries its reason and the bundle's revision to
// Status. Its message is the wrapped error's.
type refusal struct {
	reason, revision string
	unverified       bool // revision is a claim: the signature failed
	err              error
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// classify returns err's reason and revision. An error without a reason is
// an invalid bundle if it refused one, otherwise a fetch error.
func classify(err error) refusal {
	if r, ok := errors.AsType[*refusal](err); ok {
		return *r
	}
	if errors.Is(err, ErrBundleRefused) {
		return refusal{reason: ReasonInvalid}
	}
	return refusal{reason: ReasonFetch}
}

// Status returns a copy of the current status.
func (e *Engine) Status() Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.status
	s.Refusals = slices.Clone(s.Refusals)
	return s
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

// recordError notes why the active bundle was not replaced.
func (e *Engine) recordError(err error) {
	now := time.Now()
	c := classify(err)
	e.mu.Lock()
	e.status.LastError, e.status.LastErrorAt = err.Error(), now
	if errors.Is(err, ErrBundleRefused) {
		e.status.Refused++
	}
	r := Refusal{Reason: c.reason, Revision: c.revision, Unverified: c.unverified, Active: e.status.Revision, Error: err.Error(), At: now, First: now, Count: 1}
	repeat := false
	if rs := e.status.Refusals; len(rs) > 0 && rs[0].repeats(r) {
		rs[0].At = now
		rs[0].Count++
		repeat = true
	} else {
		e.status.Refusals = slices.Insert(rs, 0, r)[:min(len(rs)+1, MaxRefusals)]
	}
	e.mu.Unlock()
	e.saveStatus()
	// A refusal proper, once per run of repeats: fetch errors are this
	// proxy's own.
	if !repeat && errors.Is(err, ErrBundleRefused) {
		e.shareRefusal(r)
	}
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
