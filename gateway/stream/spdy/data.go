package spdy

import (
	"fmt"

	"github.com/moby/spdystream/spdy"

	"github.com/limenhq/limen/gateway/stream"
)

// data routes a chunk of the current data frame's payload by stream type.
func (d *Decoder) data(p []byte) error {
	st := d.dataStream
	if st == nil || len(p) == 0 {
		return nil
	}
	h := d.s.h
	client := d.dir == stream.ClientToServer
	switch {
	case st.typ == typeData:
		return h.PortData(st.port, d.dir, len(p))
	case st.typ == typeStdin && client:
		return h.Stdin(len(p))
	case st.typ == typeResize && client:
		return st.resize.Feed(p, d.resized)
	case st.typ == typeStdout && !client:
		return h.Stdout(p)
	case st.typ == typeStderr && !client:
		return h.Stderr(p)
	case st.typ == typeError && !client && d.s.kind == kindExecStatus:
		return st.status.Feed(p, d.exit)
	case st.typ == typeError && !client:
		if len(st.text)+len(p) > d.s.opts.MaxStatus {
			return fmt.Errorf("stream %d: error text longer than %d bytes", d.dataID, d.s.opts.MaxStatus)
		}
		st.text = append(st.text, p...)
		return nil
	}
	return fmt.Errorf("stream %d: %s data on a %q stream", d.dataID, d.dir, st.typ)
}

func (d *Decoder) resized(obj []byte) error {
	ts, err := stream.ParseResize(obj)
	if err != nil {
		return fmt.Errorf("stream %d: %w", d.dataID, err)
	}
	return d.s.h.Resize(ts)
}

func (d *Decoder) exit(obj []byte) error {
	st, err := stream.ParseStatus(obj)
	if err != nil {
		return fmt.Errorf("stream %d: %w", d.dataID, err)
	}
	return d.s.h.Exit(st)
}

// finish handles this direction's FIN on a stream: the server's error stream
// is complete, so its text or status is reported.
func (d *Decoder) finish(id spdy.StreamId) error {
	st := d.s.fin(id, d.dir)
	if st == nil || st.typ != typeError || d.dir != stream.ServerToClient {
		return nil
	}
	if d.s.kind == kindExecStatus {
		if st.status.Pending() {
			return fmt.Errorf("stream %d: status ended inside a JSON object", id)
		}
		return nil
	}
	return d.s.reportText(st)
}

// reportText reports a plain-text error stream once: the exit status for exec
// v1–v3 (no text means success), or a port-forward error.
func (s *Session) reportText(st *streamState) error {
	text := string(st.text)
	st.text = nil
	if s.kind == kindPortForward {
		if text == "" {
			return nil
		}
		return s.h.PortError(st.port, text)
	}
	s.mu.Lock()
	done := s.textReported
	s.textReported = true
	s.mu.Unlock()
	if done {
		return nil
	}
	if text == "" {
		return s.h.Exit(stream.ExitStatus{Code: 0})
	}
	return s.h.Exit(stream.ExitStatus{Code: 1, Message: text})
}

// flushText reports plain-text error streams that never saw their FIN or
// RST_STREAM, when the server direction ends.
func (s *Session) flushText() error {
	if s.kind == kindExecStatus {
		return nil
	}
	s.mu.Lock()
	var pending []*streamState
	for _, st := range s.streams {
		if st.typ == typeError && !st.finServer {
			pending = append(pending, st)
		}
	}
	s.mu.Unlock()
	for _, st := range pending {
		if err := s.reportText(st); err != nil {
			return err
		}
	}
	return nil
}
