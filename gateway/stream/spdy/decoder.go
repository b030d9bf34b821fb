package spdy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/moby/spdystream/spdy"

	"github.com/limenhq/limen/gateway/stream"
)

const (
	frameHeaderSize = 8
	spdyVersion     = 3
)

type decoderState int

const (
	stateHeader  decoderState = iota // reading the 8-byte common header
	stateControl                     // buffering a control frame for the framer
	stateData                        // streaming a data frame's payload
)

// Decoder decodes one direction of a SPDY connection. It implements io.Writer
// so a relay can tee a copy of the bytes into it; Writes must come in order.
// Control frames are buffered whole (up to Options.MaxControlFrame) and parsed
// by the framer, which inflates header blocks with this direction's zlib
// context; data frames are streamed in the chunks they arrive in, so a data
// frame's declared length is never allocated. Not safe for concurrent use.
type Decoder struct {
	s      *Session
	dir    stream.Direction
	framer *spdy.Framer
	rd     bytes.Reader // the buffered control frame, read by framer

	state  decoderState
	hdr    [frameHeaderSize]byte
	hdrLen int
	ctl    []byte // control frame being buffered, header included
	ctlLen int    // its full size

	dataID        spdy.StreamId
	dataFin       bool
	dataRemaining int
	dataStream    *streamState // nil: unknown stream, payload dropped

	err error // sticky

	// pos counts the bytes consumed; boundary is pos where the last frame
	// ended, the last point at which a relay may cut or insert a frame.
	pos, boundary int64
}

func newDecoder(s *Session, dir stream.Direction) (*Decoder, error) {
	d := &Decoder{s: s, dir: dir}
	f, err := spdy.NewFramerWithOptions(io.Discard, &d.rd,
		spdy.WithMaxControlFramePayloadSize(uint32(s.opts.MaxControlFrame)),
		spdy.WithMaxHeaderCount(maxHeaderCount),
		spdy.WithMaxHeaderFieldSize(maxHeaderField))
	if err != nil {
		return nil, fmt.Errorf("spdy framer: %w", err)
	}
	d.framer = f
	return d, nil
}

// Write decodes p. It returns len(p) and nil, or 0 and the first decoding or
// Handler error, after which every Write fails with the same error.
func (d *Decoder) Write(p []byte) (int, error) {
	if d.err != nil {
		return 0, d.err
	}
	if err := d.write(p); err != nil {
		d.err = fmt.Errorf("spdy %s: %w", d.dir, err)
		return 0, d.err
	}
	return len(p), nil
}

// Close reports the end of this direction's bytes. It fails if decoding failed
// or the bytes stopped inside a frame. Closing the server direction reports a
// plain-text exit status (protocols v1–v3) whose stream never saw its FIN.
func (d *Decoder) Close() error {
	if d.err != nil {
		return d.err
	}
	if d.state != stateHeader || d.hdrLen > 0 {
		d.err = fmt.Errorf("spdy %s: stream ended inside a frame", d.dir)
		return d.err
	}
	if d.dir == stream.ServerToClient {
		if err := d.s.flushText(); err != nil {
			d.err = fmt.Errorf("spdy %s: %w", d.dir, err)
			return d.err
		}
	}
	return nil
}

func (d *Decoder) write(p []byte) error {
	for len(p) > 0 {
		var n int
		var err error
		switch d.state {
		case stateHeader:
			n = copy(d.hdr[d.hdrLen:], p)
			d.hdrLen += n
			if d.hdrLen == frameHeaderSize {
				d.hdrLen = 0
				err = d.startFrame()
			}
		case stateControl:
			n = min(len(p), d.ctlLen-len(d.ctl))
			d.ctl = append(d.ctl, p[:n]...)
			if len(d.ctl) == d.ctlLen {
				err = d.controlFrame()
			}
		case stateData:
			n = min(len(p), d.dataRemaining)
			d.dataRemaining -= n
			err = d.data(p[:n])
			if err == nil && d.dataRemaining == 0 {
				err = d.endData()
			}
		}
		if err != nil {
			return err
		}
		p = p[n:]
		d.pos += int64(n)
		if d.state == stateHeader && d.hdrLen == 0 {
			d.boundary = d.pos
		}
	}
	return nil
}

// Pending returns how many of the bytes written so far belong to a frame
// that is not complete: a relay that holds these back can always cut the
// stream, or insert a frame, between frames.
func (d *Decoder) Pending() int64 { return d.pos - d.boundary }

// startFrame interprets a complete common header.
func (d *Decoder) startFrame() error {
	word := binary.BigEndian.Uint32(d.hdr[0:4])
	length := int(binary.BigEndian.Uint32(d.hdr[4:8]) & 0xffffff)
	if word&0x80000000 != 0 {
		if v := (word >> 16) & 0x7fff; v != spdyVersion {
			return fmt.Errorf("control frame has SPDY version %d, want %d", v, spdyVersion)
		}
		if length > d.s.opts.MaxControlFrame {
			return fmt.Errorf("control frame type %d of %d bytes exceeds the %d-byte limit", word&0xffff, length, d.s.opts.MaxControlFrame)
		}
		d.ctl = append(d.ctl[:0], d.hdr[:]...)
		d.ctlLen = frameHeaderSize + length
		d.state = stateControl
		if length == 0 {
			return d.controlFrame()
		}
		return nil
	}
	d.dataID = spdy.StreamId(word & 0x7fffffff)
	if d.dataID == 0 {
		return errors.New("data frame on stream 0")
	}
	d.dataFin = d.hdr[4]&byte(spdy.DataFlagFin) != 0
	d.dataRemaining = length
	d.dataStream = d.s.lookup(d.dataID)
	d.state = stateData
	if length == 0 {
		return d.endData()
	}
	return nil
}

// controlFrame parses a complete control frame with the framer.
func (d *Decoder) controlFrame() error {
	d.state = stateHeader
	d.rd.Reset(d.ctl)
	frame, err := d.framer.ReadFrame()
	if err != nil {
		return fmt.Errorf("control frame: %w", err)
	}
	if d.rd.Len() != 0 {
		return fmt.Errorf("control frame %T has %d bytes beyond its fields", frame, d.rd.Len())
	}
	if cap(d.ctl) > 4<<10 {
		d.ctl = nil // do not keep a large buffer for the connection's lifetime
	}
	switch f := frame.(type) {
	case *spdy.SynStreamFrame:
		return d.s.open(f.StreamId, f.Headers, f.CFHeader.Flags&spdy.ControlFlagFin != 0, d.dir)
	case *spdy.SynReplyFrame:
		if f.CFHeader.Flags&spdy.ControlFlagFin != 0 {
			return d.finish(f.StreamId)
		}
	case *spdy.HeadersFrame:
		if f.CFHeader.Flags&spdy.ControlFlagFin != 0 {
			return d.finish(f.StreamId)
		}
	case *spdy.RstStreamFrame:
		st := d.s.reset(f.StreamId)
		// The kubelet resets a port-forward error stream right after writing
		// the error, without a FIN. Only the server direction owns the text.
		if st != nil && st.typ == typeError && d.dir == stream.ServerToClient && d.s.kind != kindExecStatus {
			return d.s.reportText(st)
		}
	case *spdy.GoAwayFrame:
		return d.s.h.Close(d.dir)
	}
	return nil // SETTINGS, PING, WINDOW_UPDATE carry nothing to record
}

// endData finishes a data frame.
func (d *Decoder) endData() error {
	d.state = stateHeader
	if d.dataFin {
		return d.finish(d.dataID)
	}
	return nil
}
