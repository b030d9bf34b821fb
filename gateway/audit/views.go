package audit

// Events of someone reading what Limen keeps: who looked at which
// recording, and who searched the audit trail for what. Reading a session's
// keystrokes and output, or the trail of who did what, is itself an act an
// auditor must be able to find.
const (
	// TypeRecordingView is a recording played or downloaded (SessionID is
	// the recording's; Fields say how, and whose it is).
	TypeRecordingView Type = "recording.view"
	// TypeAuditSearch is a search of the audit trail (Fields are its
	// filters).
	TypeAuditSearch Type = "audit.search"
)
