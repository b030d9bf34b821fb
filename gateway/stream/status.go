package stream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Status values and the reason/cause the kubelet uses for a non-zero exit.
const (
	statusSuccess         = "Success"
	statusFailure         = "Failure"
	reasonNonZeroExitCode = "NonZeroExitCode"
	causeExitCode         = "ExitCode"
)

// status is the subset of metav1.Status written on the error channel.
type status struct {
	Status  string `json:"status"`
	Message string `json:"message"`
	Reason  string `json:"reason"`
	Details *struct {
		Causes []struct {
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"causes"`
	} `json:"details"`
}

// ParseStatus decodes a metav1.Status JSON object from the status channel (v4
// and v5 channel protocols) into an ExitStatus.
func ParseStatus(b []byte) (ExitStatus, error) {
	var st status
	if err := json.Unmarshal(b, &st); err != nil {
		return ExitStatus{}, fmt.Errorf("parse status: %w", err)
	}
	switch st.Status {
	case statusSuccess:
		return ExitStatus{Code: 0, Message: st.Message}, nil
	case statusFailure:
	default:
		return ExitStatus{}, fmt.Errorf("parse status: unknown status %q", st.Status)
	}
	out := ExitStatus{Code: 1, Reason: st.Reason, Message: st.Message}
	if st.Reason != reasonNonZeroExitCode || st.Details == nil {
		return out, nil
	}
	for _, c := range st.Details.Causes {
		if c.Reason != causeExitCode {
			continue
		}
		code, err := strconv.Atoi(c.Message)
		if err != nil || code < 0 || code > 255 {
			return ExitStatus{}, fmt.Errorf("parse status: exit code %q is not in 0..255", c.Message)
		}
		out.Code = code
		return out, nil
	}
	return out, nil
}

// JSONObjects splits a byte stream into consecutive JSON objects, the way the
// kubelet reads the resize channel with a json.Decoder: an object may span
// several messages or frames, and one message may hold several objects. It
// holds at most Max bytes of an incomplete object.
type JSONObjects struct {
	// Max bounds the bytes buffered for one incomplete object.
	Max int
	buf []byte
}

// Feed appends p and calls each for every complete object, in order. A syntax
// error, a value that is not an object, or an object above Max is an error.
func (s *JSONObjects) Feed(p []byte, each func(obj []byte) error) error {
	if len(s.buf)+len(p) > s.Max {
		return fmt.Errorf("json object larger than %d bytes", s.Max)
	}
	s.buf = append(s.buf, p...)
	for {
		rest := bytes.TrimLeft(s.buf, " \t\r\n")
		if len(rest) == 0 {
			s.buf = s.buf[:0]
			return nil
		}
		if rest[0] != '{' {
			return fmt.Errorf("expected a json object, found %q", rest[0])
		}
		dec := json.NewDecoder(bytes.NewReader(rest))
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				s.buf = append(s.buf[:0], rest...)
				return nil
			}
			return fmt.Errorf("json object: %w", err)
		}
		if err := each(raw); err != nil {
			return err
		}
		s.buf = append(s.buf[:0], rest[dec.InputOffset():]...)
	}
}

// Pending reports whether an incomplete object is buffered.
func (s *JSONObjects) Pending() bool {
	return len(bytes.TrimLeft(s.buf, " \t\r\n")) > 0
}

// ParseResize decodes one resize object {"Width":…, "Height":…}.
func ParseResize(obj []byte) (TermSize, error) {
	var ts TermSize
	if err := json.Unmarshal(obj, &ts); err != nil {
		return TermSize{}, fmt.Errorf("parse resize: %w", err)
	}
	return ts, nil
}

// FailureStatus is the metav1.Status a relay writes on the status channel
// when the stream ends before the server's own status: kubectl reports its
// message and exits non-zero (reason InternalError, not NonZeroExitCode, so
// no exit code of the command is made up).
func FailureStatus(message string) []byte {
	b, err := json.Marshal(struct {
		Kind       string   `json:"kind"`
		APIVersion string   `json:"apiVersion"`
		Metadata   struct{} `json:"metadata"`
		Status     string   `json:"status"`
		Message    string   `json:"message"`
		Reason     string   `json:"reason"`
		Code       int      `json:"code"`
	}{Kind: "Status", APIVersion: "v1", Status: statusFailure, Message: message, Reason: "InternalError", Code: 500})
	if err != nil {
		panic(err) // a struct of strings always marshals
	}
	return b
}
