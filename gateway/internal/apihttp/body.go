// Package apihttp is the plumbing the proxy's JSON APIs under /v1/ share
// (authapi: login, enrollment, users and tokens; adminapi: locks and
// sessions): who may call an endpoint (API, Gate), how a request body is read,
// how answers and errors are written, and the client side of the same
// conventions. It exists so that those rules are written once: two copies
// had already drifted apart in their body limits and in how refusals were
// audited.
package apihttp

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
)

// MaxBody bounds a request body. The largest legitimate one is a login or
// enrollment carrying a PEM certificate request, a few kilobytes.
const MaxBody = 64 << 10

// ErrorResponse is the body of every non-2xx answer.
type ErrorResponse struct {
	Error string `json:"error"`
}

// WriteJSON answers status with v as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	// The status is sent; an encoding error can only be a broken connection.
	_ = json.NewEncoder(w).Encode(v)
}

// WriteError answers status with msg in an ErrorResponse.
func WriteError(w http.ResponseWriter, status int, msg string) {
	WriteJSON(w, status, ErrorResponse{Error: msg})
}

// BodyError is a request body Decode refused, with the status to answer.
type BodyError struct {
	Status int
	Err    error
}

func (e *BodyError) Error() string { return "request body: " + e.Err.Error() }
func (e *BodyError) Unwrap() error { return e.Err }

// Decode reads r's body into v strictly, or answers the refusal and returns
// false. See DecodeRequest for the rules.
func Decode(w http.ResponseWriter, r *http.Request, v any) bool {
	err := DecodeRequest(r, v)
	if err == nil {
		return true
	}
	status := http.StatusBadRequest
	var be *BodyError
	if errors.As(err, &be) {
		status = be.Status
	}
	WriteError(w, status, err.Error())
	return false
}

// DecodeRequest reads r's body into v. It must be declared JSON
// (Content-Type application/json, else 415: a browser cannot send that
// cross-site without asking first), and then pass DecodeJSON. Errors are
// *BodyError.
func DecodeRequest(r *http.Request, v any) error {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return &BodyError{Status: http.StatusUnsupportedMediaType,
			Err: fmt.Errorf("content type %q: send application/json", r.Header.Get("Content-Type"))}
	}
	return DecodeJSON(r.Body, v)
}

// DecodeJSON reads exactly one JSON value from body into v: at most MaxBody
// bytes (else 413), no unknown fields and nothing but white space after the
// value (else 400). Errors are *BodyError with that status.
func DecodeJSON(body io.Reader, v any) error {
	lim := &limitReader{r: body, n: MaxBody}
	dec := json.NewDecoder(lim)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		err = onlySpace(io.MultiReader(dec.Buffered(), lim))
	}
	switch {
	case lim.over:
		// Checked first: a value followed by padding past the limit is
		// refused too, and a value cut off by the limit is not "malformed".
		return &BodyError{Status: http.StatusRequestEntityTooLarge, Err: fmt.Errorf("over %d bytes", MaxBody)}
	case err == nil:
		return nil
	case errors.Is(err, io.EOF):
		return &BodyError{Status: http.StatusBadRequest, Err: errors.New("empty: send a JSON object")}
	}
	return &BodyError{Status: http.StatusBadRequest, Err: err}
}

// onlySpace reads r to its end and refuses anything but JSON white space:
// a second value, or a stray closing bracket, which Decoder.More lets pass.
func onlySpace(r io.Reader) error {
	var buf [512]byte
	for {
		n, err := r.Read(buf[:])
		for _, c := range buf[:n] {
			if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
				return errors.New("more than one JSON value, or bytes after it")
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// limitReader is io.LimitReader that remembers whether the input went on
// past the limit, so that a cut-off body is reported as too large rather
// than as malformed JSON.
type limitReader struct {
	r    io.Reader
	n    int64
	over bool
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		// One byte more tells "exactly at the limit" from "over it".
		var one [1]byte
		if n, _ := l.r.Read(one[:]); n > 0 {
			l.over = true
		}
		return 0, io.EOF
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// RemoteIP is the address of the connection's peer, without the port: the
// default client address for audit and rate limiting.
func RemoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// notFound answers a request no endpoint matched.
func notFound(w http.ResponseWriter, r *http.Request) {
	WriteError(w, http.StatusNotFound, "no such API endpoint: "+r.Method+" "+r.URL.Path)
}
