// Package spdy decodes a copy of both directions of a Kubernetes SPDY/3.1
// stream (exec, attach and port-forward, directly or tunnelled in WebSocket):
// it inflates every header block in order with moby/spdystream's framer to
// learn each stream's type, and reports what flows on each stream.
//
// A Session holds the stream table shared by its two Decoders, one per
// direction. The decoders are passive and never modify the bytes.
package spdy

import (
	"encoding/binary"
	"fmt"
	"net/http"
	"strconv"
	"sync"

	"github.com/moby/spdystream/spdy"

	"github.com/limenhq/limen/gateway/stream"
)

// Stream protocols negotiated in X-Stream-Protocol-Version.
const (
	ProtocolV1          = "channel.k8s.io"
	ProtocolV2          = "v2.channel.k8s.io"
	ProtocolV3          = "v3.channel.k8s.io"
	ProtocolV4          = "v4.channel.k8s.io"
	ProtocolV5          = "v5.channel.k8s.io"
	ProtocolPortForward = "portforward.k8s.io"
)

// Stream types (the streamType header).
const (
	typeStdin  = "stdin"
	typeStdout = "stdout"
	typeStderr = "stderr"
	typeError  = "error"
	typeResize = "resize"
	typeData   = "data"
)

// kind is how a protocol's streams are interpreted.
type kind int

const (
	kindExecText   kind = iota + 1 // v1–v3: the error stream carries plain text
	kindExecStatus                 // v4+: the error stream carries metav1.Status JSON
	kindPortForward
)

// Defaults for Options.
const (
	DefaultMaxControlFrame = 64 << 10
	DefaultMaxStreams      = 1024
	DefaultMaxStatus       = 64 << 10
	maxHeaderCount         = 64
	maxHeaderField         = 16 << 10
)

// Options bounds a Session's memory. Zero values mean the defaults.
type Options struct {
	// MaxControlFrame bounds a control frame (SYN_STREAM…) payload; larger is an error.
	MaxControlFrame int
	// MaxStreams bounds the streams open at once.
	MaxStreams int
	// MaxStatus bounds the status or error text buffered for one stream.
	MaxStatus int
}

// Session decodes one SPDY connection. Its Client and Server decoders may be
// written from two goroutines; the Handler is called from both.
type Session struct {
	kind    kind
	h       stream.Handler
	opts    Options
	client  *Decoder
	server  *Decoder
	mu      sync.Mutex
	streams map[spdy.StreamId]*streamState
	// lastOpened is the highest id each direction opened: SPDY ids increase,
	// so a forgotten stream can never be opened again.
	lastOpened [2]spdy.StreamId
	// textReported is set once a v1–v3 exit status was reported.
	textReported bool
	// errorStream is the exec/attach error stream, 0 until it is opened.
	errorStream spdy.StreamId
}

// streamState is one SPDY stream. Its buffers are touched only by the
// direction that may send data on that stream type; the flags under Session.mu.
type streamState struct {
	typ       string
	port      uint16
	finClient bool
	finServer bool
	status    stream.JSONObjects // exec error stream, v4+
	text      []byte             // exec error stream v1–v3, port-forward error stream
	resize    stream.JSONObjects
}

// NewSession returns a Session for the negotiated protocol, reporting to h.
func NewSession(protocol string, h stream.Handler, opts Options) (*Session, error) {
	var k kind
	switch protocol {
	case ProtocolV1, ProtocolV2, ProtocolV3:
		k = kindExecText
	case ProtocolV4, ProtocolV5:
		k = kindExecStatus
	case ProtocolPortForward:
		k = kindPortForward
	default:
		return nil, fmt.Errorf("spdy: stream protocol %q cannot be decoded", protocol)
	}
	if h == nil {
		return nil, fmt.Errorf("spdy: nil Handler")
	}
	if opts.MaxControlFrame <= 0 {
		opts.MaxControlFrame = DefaultMaxControlFrame
	}
	if opts.MaxStreams <= 0 {
		opts.MaxStreams = DefaultMaxStreams
	}
	if opts.MaxStatus <= 0 {
		opts.MaxStatus = DefaultMaxStatus
	}
	s := &Session{kind: k, h: h, opts: opts, streams: make(map[spdy.StreamId]*streamState)}
	var err error
	if s.client, err = newDecoder(s, stream.ClientToServer); err != nil {
		return nil, err
	}
	if s.server, err = newDecoder(s, stream.ServerToClient); err != nil {
		return nil, err
	}
	return s, nil
}

// Client returns the decoder for the client → server bytes.
func (s *Session) Client() *Decoder { return s.client }

// Server returns the decoder for the server → client bytes.
func (s *Session) Server() *Decoder { return s.server }

// open registers a stream announced by SYN_STREAM.
func (s *Session) open(id spdy.StreamId, hdr http.Header, fin bool, dir stream.Direction) error {
	st, err := s.newStream(hdr)
	if err != nil {
		return fmt.Errorf("stream %d: %w", id, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if id <= s.lastOpened[dir] {
		return fmt.Errorf("stream %d opened after stream %d (ids must increase)", id, s.lastOpened[dir])
	}
	if len(s.streams) >= s.opts.MaxStreams {
		return fmt.Errorf("more than %d streams open", s.opts.MaxStreams)
	}
	s.streams[id] = st
	s.lastOpened[dir] = id
	if st.typ == typeError && s.kind != kindPortForward && s.errorStream == 0 {
		s.errorStream = id
	}
	if fin {
		s.setFinLocked(id, st, dir)
	}
	return nil
}

// newStream validates a stream's headers against the protocol.
func (s *Session) newStream(hdr http.Header) (*streamState, error) {
	st := &streamState{
		typ:    hdr.Get("streamType"),
		status: stream.JSONObjects{Max: s.opts.MaxStatus},
		resize: stream.JSONObjects{Max: s.opts.MaxStatus},
	}
	if s.kind != kindPortForward {
		switch st.typ {
		case typeStdin, typeStdout, typeStderr, typeError, typeResize:
			return st, nil
		}
		return nil, fmt.Errorf("stream type %q is not valid for exec or attach", st.typ)
	}
	if st.typ != typeData && st.typ != typeError {
		return nil, fmt.Errorf("stream type %q is not valid for port-forward", st.typ)
	}
	port, err := strconv.ParseUint(hdr.Get("port"), 10, 16)
	if err != nil || port == 0 {
		return nil, fmt.Errorf("port-forward stream has invalid port %q", hdr.Get("port"))
	}
	st.port = uint16(port)
	return st, nil
}

// lookup returns the stream, or nil when it is unknown or already ended: the
// server drops data for such streams too, so the decoder drops it.
func (s *Session) lookup(id spdy.StreamId) *streamState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streams[id]
}

// fin marks dir's half of a stream closed and reports whether the stream was
// known. A stream closed both ways is forgotten.
func (s *Session) fin(id spdy.StreamId, dir stream.Direction) *streamState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.streams[id]
	if st != nil {
		s.setFinLocked(id, st, dir)
	}
	return st
}

func (s *Session) setFinLocked(id spdy.StreamId, st *streamState, dir stream.Direction) {
	if dir == stream.ClientToServer {
		st.finClient = true
	} else {
		st.finServer = true
	}
	if st.finClient && st.finServer {
		delete(s.streams, id)
	}
}

// reset forgets a stream ended by RST_STREAM and returns it, if it was known.
func (s *Session) reset(id spdy.StreamId) *streamState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.streams[id]
	delete(s.streams, id)
	return st
}

// OpenStreams returns how many streams the session is tracking (open in at
// least one direction).
func (s *Session) OpenStreams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.streams)
}

// Failure returns a server → client DATA frame that ends the exec or attach
// error stream with message (a failure Status for v4 and later, plain text
// before), so that the client reports it and exits non-zero. It returns nil
// for port-forward, or when the error stream is unknown or the server has
// already finished it. The caller must insert the frame at a boundary (see
// Decoder.Pending).
func (s *Session) Failure(message string) []byte {
	if s.kind == kindPortForward {
		return nil
	}
	s.mu.Lock()
	st := s.streams[s.errorStream]
	open := st != nil && !st.finServer
	id := s.errorStream
	s.mu.Unlock()
	if !open {
		return nil
	}
	payload := []byte(message)
	if s.kind == kindExecStatus {
		payload = stream.FailureStatus(message)
	}
	f := make([]byte, frameHeaderSize, frameHeaderSize+len(payload))
	binary.BigEndian.PutUint32(f[0:4], uint32(id)&0x7fffffff)
	binary.BigEndian.PutUint32(f[4:8], uint32(len(payload))&0xffffff)
	f[4] = byte(spdy.DataFlagFin)
	return append(f, payload...)
}
