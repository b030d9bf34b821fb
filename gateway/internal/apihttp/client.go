package apihttp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Client calls the /v1/ API of one proxy. The API packages' clients embed
// it, so trust, hints and error decoding are the same for every call.
type Client struct {
	// Proxy is HOST:PORT.
	Proxy string
	// HTTP carries the TLS configuration (trust, client certificate).
	HTTP *http.Client
	// Hint, when set, is appended to connection errors. With TLS 1.3 a
	// refused client certificate shows up only as a reset or broken pipe, so
	// callers that present one say what to try.
	Hint string
}

// maxResponse bounds a decoded response from the proxy.
const maxResponse = 8 << 20

// Do sends in (JSON, if not nil) to path on the proxy and decodes the answer
// into out (if not nil). A non-2xx answer is a *StatusError.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "https://"+c.Proxy+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		if c.Hint != "" {
			return fmt.Errorf("%s %s: %w (%s)", method, path, err, c.Hint)
		}
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return statusError(resp)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxResponse)).Decode(out); err != nil {
		return fmt.Errorf("%s %s: bad response: %w", method, path, err)
	}
	return nil
}

// statusError turns a non-2xx response into an error that carries the
// server's message.
func statusError(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, MaxBody))
	var e ErrorResponse
	if json.Unmarshal(data, &e) != nil || e.Error == "" {
		e.Error = strings.TrimSpace(string(data))
	}
	return &StatusError{Code: resp.StatusCode, Message: e.Error}
}

// StatusError is an error answer from the API.
type StatusError struct {
	Code    int
	Message string
}

// Error reports the status and the server's message.
func (e *StatusError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Code, http.StatusText(e.Code), e.Message)
}
