package adminapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/limenhq/limen/gateway/authapi"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/sessions"
)

// Client calls the session-control admin API of one proxy.
type Client struct {
	// Proxy is HOST:PORT.
	Proxy string
	// HTTP carries the TLS configuration (trust, client certificate).
	HTTP *http.Client
}

// NewClient reuses an identity API client's proxy and TLS configuration.
func NewClient(c *authapi.Client) *Client { return &Client{Proxy: c.Proxy, HTTP: c.HTTP} }

// Lock locks a user or bot.
func (c *Client) Lock(ctx context.Context, req LockRequest) (locks.Lock, error) {
	var out locks.Lock
	return out, c.do(ctx, http.MethodPost, PathLocks, req, &out)
}

// Unlock removes the lock on t and returns it.
func (c *Client) Unlock(ctx context.Context, t locks.Target) (locks.Lock, error) {
	var out locks.Lock
	path := PathLocks + "/" + url.PathEscape(string(t.Kind)) + "/" + url.PathEscape(t.Name)
	return out, c.do(ctx, http.MethodDelete, path, nil, &out)
}

// Locks lists the locks in force.
func (c *Client) Locks(ctx context.Context) ([]locks.Lock, error) {
	var out []locks.Lock
	return out, c.do(ctx, http.MethodGet, PathLocks, nil, &out)
}

// Sessions lists live and recent sessions.
func (c *Client) Sessions(ctx context.Context) ([]sessions.Info, error) {
	var out []sessions.Info
	return out, c.do(ctx, http.MethodGet, PathSessions, nil, &out)
}

// Kill ends a live session and returns its final description.
func (c *Client) Kill(ctx context.Context, id string) (sessions.Info, error) {
	var out sessions.Info
	return out, c.do(ctx, http.MethodPost, PathSessions+"/"+url.PathEscape(id)+"/kill", nil, &out)
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
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
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return authapi.ErrorFromResponse(resp)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(out); err != nil {
		return fmt.Errorf("%s %s: bad response: %w", method, path, err)
	}
	return nil
}
