package recstore

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"unicode/utf8"
)

// The recording upload protocol. A worker uploads each recording on a
// tunnel stream of its own (kind StreamKind), never on the control stream,
// so that a large upload holds up no lock, kill or heartbeat:
//
//	worker → proxy  Header: the recording's id, size and SHA-256
//	proxy → worker  Reply: Resume at Offset (the bytes the store already
//	                holds), Stored (already there, with SHA256) or Refused
//	worker → proxy  after Resume, the recording's bytes from Offset to Size,
//	                raw
//	proxy → worker  Reply: Stored with the SHA-256 the store computed over
//	                the whole file it keeps, or Refused
//
// The worker drops its copy only after a Stored reply naming its own
// SHA-256. Both messages have a fixed binary layout, read with a bound known
// before any byte is read.

// StreamKind is the tunnel stream kind of a recording upload.
const StreamKind = "recording.upload"

// headerMagic starts every Header: the protocol and its version.
const headerMagic = "LRU1"

// maxIDLen is the longest recording id (validName).
const maxIDLen = 128

// MaxHeaderSize is the largest encoded Header.
const MaxHeaderSize = len(headerMagic) + 1 + maxIDLen + 8 + 32

// Errors of the wire format. They are returned wrapped; match with errors.Is.
var (
	ErrBadHeader = errors.New("recording upload: malformed header")
	ErrBadReply  = errors.New("recording upload: malformed reply")
)

// Header opens an upload: what the worker is about to send.
type Header struct {
	// ID names the recording: the id of the session it records, one
	// recording per session. It is checked against validName, so it is
	// always a single path element.
	ID string
	// Size is the whole recording's length in bytes.
	Size int64
	// SHA256 is the recording's checksum, lower-case hex.
	SHA256 string
}

// AppendHeader appends h's encoding to b:
//
//	"LRU1" | id length (1 byte, 1-128) | id | size (8 bytes, big-endian) | SHA-256 (32 bytes)
func AppendHeader(b []byte, h Header) ([]byte, error) {
	if err := h.validate(); err != nil {
		return b, err
	}
	sum, _ := hex.DecodeString(h.SHA256)
	b = append(b, headerMagic...)
	b = append(b, byte(len(h.ID)))
	b = append(b, h.ID...)
	b = binary.BigEndian.AppendUint64(b, uint64(h.Size))
	return append(b, sum...), nil
}

// WriteHeader writes h to w in one Write.
func WriteHeader(w io.Writer, h Header) error {
	b, err := AppendHeader(make([]byte, 0, MaxHeaderSize), h)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// ReadHeader reads one Header from r, reading no byte past it, and refuses
// anything that AppendHeader would not have written.
func ReadHeader(r io.Reader) (Header, error) {
	var fixed [len(headerMagic) + 1]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return Header{}, fmt.Errorf("%w: %w", ErrBadHeader, err)
	}
	if string(fixed[:len(headerMagic)]) != headerMagic {
		return Header{}, fmt.Errorf("%w: starts %q, want %q", ErrBadHeader, fixed[:len(headerMagic)], headerMagic)
	}
	n := int(fixed[len(headerMagic)])
	if n == 0 || n > maxIDLen {
		return Header{}, fmt.Errorf("%w: id of %d bytes, want 1-%d", ErrBadHeader, n, maxIDLen)
	}
	var rest [maxIDLen + 8 + 32]byte
	b := rest[:n+8+32]
	if _, err := io.ReadFull(r, b); err != nil {
		return Header{}, fmt.Errorf("%w: %w", ErrBadHeader, unexpected(err))
	}
	size := binary.BigEndian.Uint64(b[n:])
	if size > math.MaxInt64 {
		return Header{}, fmt.Errorf("%w: size %d out of range", ErrBadHeader, size)
	}
	h := Header{ID: string(b[:n]), Size: int64(size), SHA256: hex.EncodeToString(b[n+8:])}
	if err := h.validate(); err != nil {
		return Header{}, err
	}
	return h, nil
}

func (h Header) validate() error {
	if !validName.MatchString(h.ID) {
		return fmt.Errorf("%w: bad recording id %q", ErrBadHeader, h.ID)
	}
	if h.Size < 0 {
		return fmt.Errorf("%w: negative size %d", ErrBadHeader, h.Size)
	}
	if b, err := hex.DecodeString(h.SHA256); err != nil || len(b) != 32 || hex.EncodeToString(b) != h.SHA256 {
		return fmt.Errorf("%w: sha256 %q is not 64 lower-case hex digits", ErrBadHeader, h.SHA256)
	}
	return nil
}

// Status is what a Reply says.
type Status byte

// The Reply statuses.
const (
	// Resume asks for the recording's bytes from Reply.Offset on.
	Resume Status = 'R'
	// Stored says the store keeps the recording, with Reply.SHA256 over
	// its Reply.Offset bytes.
	Stored Status = 'S'
	// Refused says why the store does not take the upload (Reply.Reason).
	Refused Status = 'X'
)

func (s Status) String() string {
	switch s {
	case Resume:
		return "resume"
	case Stored:
		return "stored"
	case Refused:
		return "refused"
	}
	return fmt.Sprintf("status(%#x)", byte(s))
}

// MaxReason bounds a refusal's text.
const MaxReason = 1024

// replyFixed is a Reply's size without its reason.
const replyFixed = 1 + 8 + 32 + 2

// Reply is the proxy's answer to a Header (the offer) and to the bytes that
// follow (the acknowledgement).
type Reply struct {
	Status Status
	// Offset is where the worker resumes (Resume) or the stored size
	// (Stored).
	Offset int64
	// SHA256 is the stored recording's checksum (Stored only).
	SHA256 string
	// Reason says why the upload was refused (Refused only): printable
	// UTF-8, at most MaxReason bytes.
	Reason string
}

// refusal builds a Refused reply from err: control characters become
// spaces and the text is cut to MaxReason bytes.
func refusal(err error) Reply {
	reason := strings.Map(func(c rune) rune {
		if isControl(c) {
			return ' '
		}
		return c
	}, strings.ToValidUTF8(err.Error(), "?"))
	if len(reason) > MaxReason {
		reason = strings.ToValidUTF8(reason[:MaxReason], "")
	}
	if reason == "" {
		reason = "refused"
	}
	return Reply{Status: Refused, Reason: reason}
}

func isControl(c rune) bool { return c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0) }

// AppendReply appends r's encoding to b:
//
//	status (1 byte) | offset (8 bytes, big-endian) | SHA-256 (32 bytes, zero unless Stored) |
//	reason length (2 bytes, big-endian) | reason
func AppendReply(b []byte, r Reply) ([]byte, error) {
	if err := r.validate(); err != nil {
		return b, err
	}
	var sum [32]byte
	if r.Status == Stored {
		_, _ = hex.Decode(sum[:], []byte(r.SHA256))
	}
	b = append(b, byte(r.Status))
	b = binary.BigEndian.AppendUint64(b, uint64(r.Offset))
	b = append(b, sum[:]...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(r.Reason)))
	return append(b, r.Reason...), nil
}

// WriteReply writes r to w in one Write.
func WriteReply(w io.Writer, r Reply) error {
	b, err := AppendReply(make([]byte, 0, replyFixed+len(r.Reason)), r)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// ReadReply reads one Reply from r, reading no byte past it, and refuses
// anything that AppendReply would not have written.
func ReadReply(rd io.Reader) (Reply, error) {
	var fixed [replyFixed]byte
	if _, err := io.ReadFull(rd, fixed[:]); err != nil {
		return Reply{}, fmt.Errorf("%w: %w", ErrBadReply, err)
	}
	off := binary.BigEndian.Uint64(fixed[1:])
	if off > math.MaxInt64 {
		return Reply{}, fmt.Errorf("%w: offset %d out of range", ErrBadReply, off)
	}
	r := Reply{Status: Status(fixed[0]), Offset: int64(off)}
	sum := fixed[9:41]
	if r.Status == Stored {
		r.SHA256 = hex.EncodeToString(sum)
	} else if [32]byte(sum) != ([32]byte{}) {
		return Reply{}, fmt.Errorf("%w: a %s reply with a checksum", ErrBadReply, r.Status)
	}
	n := int(binary.BigEndian.Uint16(fixed[41:]))
	if n > MaxReason {
		return Reply{}, fmt.Errorf("%w: reason of %d bytes, at most %d", ErrBadReply, n, MaxReason)
	}
	if n > 0 {
		reason := make([]byte, n)
		if _, err := io.ReadFull(rd, reason); err != nil {
			return Reply{}, fmt.Errorf("%w: %w", ErrBadReply, unexpected(err))
		}
		r.Reason = string(reason)
	}
	if err := r.validate(); err != nil {
		return Reply{}, err
	}
	return r, nil
}

func (r Reply) validate() error {
	if r.Offset < 0 {
		return fmt.Errorf("%w: negative offset", ErrBadReply)
	}
	switch r.Status {
	case Resume:
		if r.SHA256 != "" || r.Reason != "" {
			return fmt.Errorf("%w: a resume reply carries only its offset", ErrBadReply)
		}
	case Stored:
		if b, err := hex.DecodeString(r.SHA256); err != nil || len(b) != 32 || hex.EncodeToString(b) != r.SHA256 {
			return fmt.Errorf("%w: stored with sha256 %q, not 64 lower-case hex digits", ErrBadReply, r.SHA256)
		}
		if r.Reason != "" {
			return fmt.Errorf("%w: a stored reply with a reason", ErrBadReply)
		}
	case Refused:
		if r.Offset != 0 || r.SHA256 != "" {
			return fmt.Errorf("%w: a refusal carries only its reason", ErrBadReply)
		}
		if r.Reason == "" || len(r.Reason) > MaxReason || !utf8.ValidString(r.Reason) {
			return fmt.Errorf("%w: a refusal needs a reason of 1-%d bytes of UTF-8", ErrBadReply, MaxReason)
		}
		for _, c := range r.Reason {
			if isControl(c) {
				return fmt.Errorf("%w: reason has control character %U", ErrBadReply, c)
			}
		}
	default:
		return fmt.Errorf("%w: unknown status %#x", ErrBadReply, byte(r.Status))
	}
	return nil
}

// unexpected turns a clean io.EOF inside a message into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
