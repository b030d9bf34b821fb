// Package stream holds what the WebSocket and SPDY decoders share: the events
// they report about an upgraded Kubernetes stream (exec, attach, port-forward)
// and the parsers for the JSON carried on the resize and status channels.
//
// The decoders never terminate a protocol; they read a copy of the bytes
// relayed in one direction and report what they saw to a Handler.
package stream

import "fmt"

// Direction is the way bytes flow through the relay.
type Direction int

const (
	// ClientToServer is kubectl → API server (stdin, resize, port-forward uploads).
	ClientToServer Direction = iota
	// ServerToClient is API server → kubectl (stdout, stderr, status, downloads).
	ServerToClient
)

// String names the direction for logs and errors.
func (d Direction) String() string {
	switch d {
	case ClientToServer:
		return "client→server"
	case ServerToClient:
		return "server→client"
	}
	return fmt.Sprintf("direction(%d)", int(d))
}

// TermSize is a terminal size sent on the resize channel.
type TermSize struct {
	Width  uint16
	Height uint16
}

// ExitStatus is what the status (error) channel said about how the command ended.
type ExitStatus struct {
	// Code is 0 on success, the process exit code for NonZeroExitCode, and 1
	// for any other failure (kubectl exits 1 then too).
	Code int
	// Reason is the metav1.Status reason ("NonZeroExitCode", "InternalError"…), if any.
	Reason string
	// Message is the human-readable status message, if any.
	Message string
}

// Handler receives the events decoded from one stream. The two directions of a
// connection are decoded by two decoders that usually run on two goroutines, so
// a Handler shared by both must be safe for concurrent use. A byte slice passed
// to a method is valid only during the call. A non-nil error ends decoding: the
// decoder's Write returns it, and the relay is expected to end the stream.
type Handler interface {
	// Stdin reports n bytes sent to the process's stdin; the content is never exposed.
	Stdin(n int) error
	// Stdout reports bytes the process wrote to stdout (the terminal, under a tty).
	Stdout(p []byte) error
	// Stderr reports bytes the process wrote to stderr.
	Stderr(p []byte) error
	// Resize reports a terminal resize sent by the client.
	Resize(size TermSize) error
	// Exit reports the decoded status channel.
	Exit(status ExitStatus) error
	// CloseChannel reports the v5 channel close signal [255, channel] sent in dir.
	CloseChannel(dir Direction, channel int) error
	// PortData reports n bytes of port-forward data moved in dir on port.
	PortData(port uint16, dir Direction, n int) error
	// PortError reports an error message the server sent for a forwarded port.
	PortError(port uint16, message string) error
	// Close reports that the peer sending in dir closed the connection
	// (WebSocket close frame, SPDY GOAWAY).
	Close(dir Direction) error
}

// NopHandler implements every Handler method by ignoring the event. Embed it to
// handle only some events.
type NopHandler struct{}

// Stdin ignores the event.
func (NopHandler) Stdin(int) error { return nil }

// Stdout ignores the event.
func (NopHandler) Stdout([]byte) error { return nil }

// Stderr ignores the event.
func (NopHandler) Stderr([]byte) error { return nil }

// Resize ignores the event.
func (NopHandler) Resize(TermSize) error { return nil }

// Exit ignores the event.
func (NopHandler) Exit(ExitStatus) error { return nil }

// CloseChannel ignores the event.
func (NopHandler) CloseChannel(Direction, int) error { return nil }

// PortData ignores the event.
func (NopHandler) PortData(uint16, Direction, int) error { return nil }

// PortError ignores the event.
func (NopHandler) PortError(uint16, string) error { return nil }

// Close ignores the event.
func (NopHandler) Close(Direction) error { return nil }

var _ Handler = NopHandler{}
