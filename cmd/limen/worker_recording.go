package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/recording"
	"github.com/limenhq/limen/gateway/tunnel"
	"github.com/limenhq/limen/gateway/worker"
)

// Control messages that carry session events from worker to proxy.
const (
	msgAuditEvent = "audit.event"
	msgAuditAck   = "audit.ack"
)

// auditAck answers an audit.event: an empty Error means the event is stored.
type auditAck struct {
	Error string `json:"error,omitempty"`
}

// spoolDirName is the recording spool inside the worker's data directory.
const spoolDirName = "recordings"

// startWorkerRecording gives h its session-event channel, its recording
// spool (DATA/recordings) and its HTTP/1.1 transport for upgrades, and starts
// the uploader. The returned stop cancels
// the uploader and waits for it.
func startWorkerRecording(ctx context.Context, dataDir, caFile string, h *worker.Handler, client *tunnel.Client, log *slog.Logger) (stop func(), err error) {
	spool, err := recording.OpenSpool(filepath.Join(dataDir, spoolDirName))
	if err != nil {
		return nil, fmt.Errorf("recording spool in %s: %w; check that the worker can write its data directory", dataDir, err)
	}
	if h.Upgrades, err = worker.UpgradeTransport(caFile); err != nil {
		return nil, err
	}
	up := worker.NewUploader(spool, client, client.Connected, log.With("component", "upload"))
	h.Spool, h.Recorded = spool, func(recording.Item) { up.Kick() }
	h.Events = func(ctx context.Context, ev audit.Event) error { return sendAuditEvent(ctx, client, ev) }
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = up.Run(ctx)
	}()
	return func() { cancel(); wg.Wait() }, nil
}

// sendAuditEvent delivers ev to the proxy's audit store and waits for its
// acknowledgement, retrying while the tunnel reconnects until ctx ends.
func sendAuditEvent(ctx context.Context, client *tunnel.Client, ev audit.Event) error {
	m, err := tunnel.NewMessage(msgAuditEvent, ev)
	if err != nil {
		return err
	}
	for {
		reply, err := client.Request(ctx, m)
		if err == nil {
			var ack auditAck
			if err := reply.Decode(&ack); err != nil {
				return fmt.Errorf("audit ack: %w", err)
			}
			if ack.Error != "" {
				return fmt.Errorf("proxy did not store the event: %s", ack.Error)
			}
			return nil
		}
		if !errors.Is(err, tunnel.ErrNotConnected) && !errors.Is(err, tunnel.ErrTunnelClosed) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("audit event not delivered: %w", err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
