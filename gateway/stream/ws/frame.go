package ws

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/gobwas/ws"
)

// maxControlPayload is RFC 6455's limit for ping, pong and close payloads.
const maxControlPayload = 125

// scratchSize bounds the copy made to unmask client payloads: the relay's
// buffer is never modified, and memory stays constant whatever the declared
// frame length.
const scratchSize = 32 << 10

// frameReader is the RFC 6455 layer: it turns arbitrary chunks of one
// direction into payload chunks of data messages, whatever the split points.
type frameReader struct {
	masked bool // frames in this direction must be masked (client → server)

	hdr    [ws.MaxHeaderSize]byte
	hdrLen int // bytes of hdr filled
	// hdrReader and hdrScratch let ws.ReadHeaderBuffer parse without allocating.
	hdrReader  bytes.Reader
	hdrScratch [ws.MaxHeaderSize - 2]byte
	inHdr      bool

	cur       ws.Header // frame whose payload is being read
	remaining int64
	maskOff   int

	inMessage bool      // a data message is open (awaiting continuation frames)
	msgOp     ws.OpCode // opcode of the open message
	ctl       []byte    // control frame payload
	closed    bool      // a close frame was seen
	scratch   []byte

	// pos counts the bytes consumed; boundary is pos where the last frame
	// ended outside a fragmented message, the last point at which a relay
	// may cut the stream or insert a message of its own.
	pos, boundary int64
}

// messageSink receives data message payloads; first/last mark message edges.
type messageSink interface {
	payload(op ws.OpCode, p []byte, first, last bool) error
	closeFrame(code ws.StatusCode, reason string) error
}

func newFrameReader(masked bool) frameReader {
	return frameReader{masked: masked, inHdr: true}
}

// headerSize returns the full header size once its first two bytes are known.
func headerSize(b0, b1 byte) int {
	n := 2
	if b1&0x80 != 0 {
		n += 4
	}
	switch b1 & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	return n
}

// write consumes p entirely (or fails) and feeds sink.
func (f *frameReader) write(p []byte, sink messageSink) error {
	for len(p) > 0 {
		var n int
		if f.inHdr {
			var err error
			if n, err = f.fillHeader(p, sink); err != nil {
				return err
			}
		} else {
			n = int(min(int64(len(p)), f.remaining))
			if err := f.consumePayload(p[:n], sink); err != nil {
				return err
			}
		}
		p = p[n:]
		f.pos += int64(n)
		if !f.midFrame() {
			f.boundary = f.pos
		}
	}
	return nil
}

// pending is how many consumed bytes follow the last boundary.
func (f *frameReader) pending() int64 { return f.pos - f.boundary }

// fillHeader copies header bytes from p; when the header is complete it is
// parsed and validated. It returns how many bytes of p it used.
func (f *frameReader) fillHeader(p []byte, sink messageSink) (int, error) {
	need := 2
	if f.hdrLen >= 2 {
		need = headerSize(f.hdr[0], f.hdr[1])
	}
	n := copy(f.hdr[f.hdrLen:need], p)
	f.hdrLen += n
	if f.hdrLen < need {
		return n, nil
	}
	if need == 2 && headerSize(f.hdr[0], f.hdr[1]) > 2 {
		return n, nil // now the full size is known; keep filling
	}
	f.hdrReader.Reset(f.hdr[:f.hdrLen])
	h, err := ws.ReadHeaderBuffer(&f.hdrReader, f.hdrScratch[:])
	if err != nil {
		return n, fmt.Errorf("websocket frame header: %w", err)
	}
	f.hdrLen = 0
	if err := f.startFrame(h); err != nil {
		return n, err
	}
	if f.remaining == 0 {
		return n, f.endFrame(sink)
	}
	return n, nil
}

// startFrame validates a frame header against RFC 6455 and the message state.
func (f *frameReader) startFrame(h ws.Header) error {
	if h.Rsv != 0 {
		return fmt.Errorf("websocket frame has reserved bits %03b set (no extension was negotiated)", h.Rsv)
	}
	if h.Masked != f.masked {
		if f.masked {
			return errors.New("websocket frame from the client is not masked")
		}
		return errors.New("websocket frame from the server is masked")
	}
	// After the close frame only another close frame may come: Kubernetes'
	// wsstream (on golang.org/x/net/websocket) writes one per Close call,
	// and a close carries nothing to record.
	if f.closed && h.OpCode != ws.OpClose {
		return fmt.Errorf("websocket %s frame after the close frame", opName(h.OpCode))
	}
	switch {
	case h.OpCode.IsControl():
		if !h.OpCode.IsReserved() && h.Fin && h.Length <= maxControlPayload {
			break
		}
		return fmt.Errorf("websocket control frame %s: fin=%v length=%d is invalid", opName(h.OpCode), h.Fin, h.Length)
	case h.OpCode == ws.OpContinuation:
		if !f.inMessage {
			return errors.New("websocket continuation frame without a message to continue")
		}
	case h.OpCode == ws.OpText || h.OpCode == ws.OpBinary:
		if f.inMessage {
			return errors.New("websocket data frame inside a fragmented message")
		}
	default:
		return fmt.Errorf("websocket frame has reserved opcode %#x", byte(h.OpCode))
	}
	f.cur, f.remaining, f.maskOff, f.inHdr = h, h.Length, 0, false
	f.ctl = f.ctl[:0]
	return nil
}

// consumePayload handles part of the current frame's payload.
func (f *frameReader) consumePayload(p []byte, sink messageSink) error {
	for len(p) > 0 {
		chunk := p
		if f.cur.Masked {
			if f.scratch == nil {
				f.scratch = make([]byte, scratchSize)
			}
			n := copy(f.scratch, p)
			chunk = f.scratch[:n]
			ws.Cipher(chunk, f.cur.Mask, f.maskOff)
			f.maskOff += n
		}
		p = p[len(chunk):]
		f.remaining -= int64(len(chunk))
		if err := f.deliver(chunk, sink); err != nil {
			return err
		}
	}
	if f.remaining == 0 {
		return f.endFrame(sink)
	}
	return nil
}

// deliver passes unmasked payload to the sink, or keeps a control payload.
func (f *frameReader) deliver(chunk []byte, sink messageSink) error {
	if f.cur.OpCode.IsControl() {
		f.ctl = append(f.ctl, chunk...)
		return nil
	}
	first := !f.inMessage
	if first {
		f.inMessage, f.msgOp = true, f.cur.OpCode
	}
	last := f.cur.Fin && f.remaining == 0
	if last {
		f.inMessage = false
	}
	return sink.payload(f.msgOp, chunk, first, last)
}

// endFrame finishes a frame: empty data frames still mark message edges, and
// control frames are acted on once complete.
func (f *frameReader) endFrame(sink messageSink) error {
	f.inHdr = true
	h := f.cur
	if h.OpCode.IsControl() {
		if h.OpCode != ws.OpClose {
			return nil // ping and pong carry nothing to record
		}
		repeated := f.closed
		f.closed = true
		if len(f.ctl) == 1 {
			return errors.New("websocket close frame with a 1-byte payload")
		}
		if repeated {
			return nil // the stream's close was reported once
		}
		code, reason := ws.ParseCloseFrameData(f.ctl)
		return sink.closeFrame(code, reason)
	}
	if h.Length > 0 {
		return nil // deliver already saw the edges
	}
	first := !f.inMessage
	if first {
		f.inMessage, f.msgOp = true, h.OpCode
	}
	if h.Fin {
		f.inMessage = false
	}
	return sink.payload(f.msgOp, nil, first, h.Fin)
}

// midFrame reports whether a frame or message is incomplete.
func (f *frameReader) midFrame() bool {
	return !f.inHdr || f.hdrLen > 0 || f.inMessage
}

func opName(op ws.OpCode) string {
	switch op {
	case ws.OpContinuation:
		return "continuation"
	case ws.OpText:
		return "text"
	case ws.OpBinary:
		return "binary"
	case ws.OpClose:
		return "close"
	case ws.OpPing:
		return "ping"
	case ws.OpPong:
		return "pong"
	}
	return fmt.Sprintf("opcode %#x", byte(op))
}
