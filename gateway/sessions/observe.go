package sessions

import (
	"fmt"

	"github.com/limenhq/limen/gateway/tunnel"
)

// The console's live view (DESIGN.md §7a): the proxy asks the workers of a
// session's cluster with TypeObserve; the worker that holds the session
// opens a stream of kind ObserveStreamKind toward the proxy, writes the
// Observe it answers as the stream's first line, and then the session's
// recording as it is written (asciicast v3), closing the stream when the
// session has ended and its recording is complete. The recording is what
// is sent: output, resizes and the exit status, never stdin. A worker that
// does not hold the session does nothing.
const (
	TypeObserve       = "session.observe"
	ObserveStreamKind = "session.observe"
)

// Observe is the body of TypeObserve and the first line of its stream.
type Observe struct {
	ID string `json:"id"`
	// Nonce ties the stream to the request that asked for it.
	Nonce string `json:"nonce"`
}

// Validate checks an Observe from the other hop.
func (o Observe) Validate() error {
	if err := ValidID(o.ID); err != nil {
		return fmt.Errorf("%w: %s: %v", tunnel.ErrBadMessage, TypeObserve, err)
	}
	if o.Nonce == "" || len(o.Nonce) > 64 {
		return fmt.Errorf("%w: %s: nonce must be 1-64 bytes", tunnel.ErrBadMessage, TypeObserve)
	}
	return nil
}
