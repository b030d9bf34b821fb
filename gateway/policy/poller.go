package policy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// Run polls the bundle service until ctx ends or Close is called, waiting
// a random delay between MinDelay and MaxDelay between polls. It fetches
// at once on start. For the embedded default or a static bundle it returns
// nil immediately. Run must be called at most once.
func (e *Engine) Run(ctx context.Context) error {
	if e.opts.Source() != SourceService {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	e.runMu.Lock()
	if e.done != nil {
		e.runMu.Unlock()
		cancel()
		return errors.New("policy engine: Run called twice")
	}
	e.cancel, e.done = cancel, make(chan struct{})
	e.runMu.Unlock()
	defer close(e.done)
	defer cancel()
	for {
		if err := e.Refresh(ctx); err != nil && ctx.Err() == nil {
			e.log.Warn("policy bundle fetch failed; the active bundle stays", "url", e.opts.BundleURL, "error", err)
		}
		delay := e.opts.MinDelay
		if span := e.opts.MaxDelay - e.opts.MinDelay; span > 0 {
			delay += rand.N(span)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// Close stops Run, waits for it to return, and releases idle connections.
func (e *Engine) Close() error {
	e.runMu.Lock()
	cancel, done := e.cancel, e.done
	e.runMu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	e.opts.HTTPClient.CloseIdleConnections()
	return nil
}

// Refresh fetches the bundle once and activates it if it is new. A bundle
// must verify, carry a revision newer than the newest one seen (or the same
// revision with the same content, which changes nothing) and pass the
// activation checks. The error says why nothing was activated; the active
// bundle answers either way.
func (e *Engine) Refresh(ctx context.Context) error {
	if e.opts.Source() != SourceService {
		return nil
	}
	e.refreshMu.Lock()
	defer e.refreshMu.Unlock()
	raw, etag, err := e.fetch(ctx)
	if err != nil {
		e.recordError(err)
		return err
	}
	if raw == nil { // 304: the active bundle is current
		e.recordFetch()
		return nil
	}
	c, err := readBundle(raw, e.opts.verifier(), e.opts.MaxBundleBytes)
	same := false
	if err == nil {
		e.mu.Lock()
		floor := e.floor
		e.mu.Unlock()
		if floor, err = e.sharedFloor(ctx, floor); err == nil {
			same, err = checkOrder(floor, c)
		}
	}
	if err != nil {
		e.recordError(err)
		c := classify(err)
		e.log.Warn("policy bundle refused; the active bundle stays", "url", e.opts.BundleURL, "reason", c.reason, "revision", c.revision, "error", err)
		return err
	}
	if !same || !e.isActive(c.mark) {
		if err := e.activate(ctx, c, raw); err != nil {
			return err
		}
	}
	e.mu.Lock()
	e.etag = etag
	e.mu.Unlock()
	e.recordFetch()
	return nil
}

// isActive reports whether the active snapshot is exactly the bundle m marks.
func (e *Engine) isActive(m *mark) bool {
	s := e.active.Load()
	return s != nil && s.mark != nil && m != nil && *s.mark == *m
}

// fetch GETs the bundle with If-None-Match. It returns nil bytes on 304.
func (e *Engine) fetch(ctx context.Context) ([]byte, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.opts.BundleURL, nil)
	if err != nil {
		return nil, "", fmt.Errorf("bundle request: %w", err)
	}
	e.mu.Lock()
	// Only send an ETag for a bundle that is actually active.
	if e.etag != "" && e.active.Load() != nil {
		req.Header.Set("If-None-Match", e.etag)
	}
	e.mu.Unlock()
	req.Header.Set("Accept", "application/gzip, application/octet-stream")
	resp, err := e.opts.HTTPClient.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("fetch bundle from %s: %w", e.opts.BundleURL, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotModified:
		return nil, "", nil
	case http.StatusOK:
	default:
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, "", fmt.Errorf("fetch bundle from %s: server answered %s", e.opts.BundleURL, resp.Status)
	}
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(resp.Body, e.opts.MaxBundleBytes+1))
	if err != nil {
		return nil, "", fmt.Errorf("fetch bundle from %s: read body: %w", e.opts.BundleURL, err)
	}
	if n > e.opts.MaxBundleBytes {
		return nil, "", fmt.Errorf("%w: bundle from %s exceeds %d bytes", ErrBundleRefused, e.opts.BundleURL, e.opts.MaxBundleBytes)
	}
	return buf.Bytes(), resp.Header.Get("ETag"), nil
}

// persist keeps the last activated bundle for a restart with the service down.
func (e *Engine) persist(raw []byte) {
	if e.opts.PersistDir == "" {
		return
	}
	if err := writeFileAtomic(filepath.Join(e.opts.PersistDir, bundleFile), raw); err != nil {
		e.log.Warn("policy bundle not persisted; a restart will wait for the bundle service", "dir", e.opts.PersistDir, "error", err)
	}
}

// loadRefusals carries the refusal history of the previous run over, so
// `limen policy status` still shows why a bundle was refused before a restart.
func (e *Engine) loadRefusals() {
	if e.opts.PersistDir == "" {
		return
	}
	if old, err := ReadStatus(e.opts.PersistDir); err == nil && old.Source == SourceService {
		e.status.Refusals = old.Refusals[:min(len(old.Refusals), MaxRefusals)]
	}
}

// loadPersisted activates the last good bundle, verified again exactly like a
// fetched one. A missing file is normal on first start.
func (e *Engine) loadPersisted(ctx context.Context) {
	if e.opts.PersistDir == "" {
		return
	}
	path := filepath.Join(e.opts.PersistDir, bundleFile)
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err == nil {
		var c content
		if c, err = readBundle(raw, e.opts.verifier(), e.opts.MaxBundleBytes); err == nil {
			// Its verified revision is the floor even if this binary cannot
			// activate it: the service may not go back behind it.
			e.mu.Lock()
			e.floor = c.mark
			e.mu.Unlock()
			// Behind the deployment's floor, it is a rollback here too.
			var floor *mark
			if floor, err = e.sharedFloor(ctx, nil); err == nil {
				if _, err = checkOrder(floor, c); err == nil {
					err = e.activate(ctx, c, nil)
				}
			}
		} else {
			e.recordError(err)
		}
	}
	if err != nil {
		e.log.Warn("persisted policy bundle not used", "path", path, "error", err)
		return
	}
	e.log.Info("persisted policy bundle active until the bundle service answers", "path", path)
}
