package adminapi

import (
	"context"
	"net/http"
	"net/url"

	"github.com/limenhq/limen/gateway/authapi"
	"github.com/limenhq/limen/gateway/internal/apihttp"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/sessions"
)

// Client calls the session-control admin API of one proxy.
type Client struct{ apihttp.Client }

// NewClient reuses an identity API client's proxy, TLS configuration and
// hint.
func NewClient(c *authapi.Client) *Client { return &Client{c.Client} }

// Lock locks a user or bot.
func (c *Client) Lock(ctx context.Context, req LockRequest) (locks.Lock, error) {
	var out locks.Lock
	return out, c.Do(ctx, http.MethodPost, PathLocks, req, &out)
}

// Unlock removes the lock on t and returns it.
func (c *Client) Unlock(ctx context.Context, t locks.Target) (locks.Lock, error) {
	var out locks.Lock
	path := PathLocks + "/" + url.PathEscape(string(t.Kind)) + "/" + url.PathEscape(t.Name)
	return out, c.Do(ctx, http.MethodDelete, path, nil, &out)
}

// Locks lists the locks in force.
func (c *Client) Locks(ctx context.Context) ([]locks.Lock, error) {
	var out []locks.Lock
	return out, c.Do(ctx, http.MethodGet, PathLocks, nil, &out)
}

// Sessions lists live and recent sessions.
func (c *Client) Sessions(ctx context.Context) ([]sessions.Info, error) {
	var out []sessions.Info
	return out, c.Do(ctx, http.MethodGet, PathSessions, nil, &out)
}

// Kill ends a live session and returns its final description.
func (c *Client) Kill(ctx context.Context, id string) (sessions.Info, error) {
	var out sessions.Info
	return out, c.Do(ctx, http.MethodPost, PathSessions+"/"+url.PathEscape(id)+"/kill", nil, &out)
}
