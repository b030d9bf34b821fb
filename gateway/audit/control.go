package audit

// Control-stream messages that carry a worker's session events to the
// proxy's store. The worker sends each session.start and session.end as
// MsgEvent and waits for MsgEventAck: the event counts as stored only once
// the ack comes back without an Error.
const (
	MsgEvent    = "audit.event"
	MsgEventAck = "audit.ack"
)

// EventAck answers a MsgEvent: an empty Error means the event is stored.
type EventAck struct {
	Error string `json:"error,omitempty"`
}
