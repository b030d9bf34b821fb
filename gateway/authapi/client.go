package authapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/limenhq/limen/gateway/enroll"
	"github.com/limenhq/limen/gateway/users"
)

// Client calls the identity API of one proxy.
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
// into out (if not nil). Any other package's client of the proxy's /v1/ API
// calls it, so trust, hints and error decoding stay in one place.
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
		return ErrorFromResponse(resp)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxResponse)).Decode(out); err != nil {
		return fmt.Errorf("%s %s: bad response: %w", method, path, err)
	}
	return nil
}

// Login exchanges a password and a CSR for a certificate.
func (c *Client) Login(ctx context.Context, req LoginRequest) (LoginResponse, error) {
	var out LoginResponse
	return out, c.Do(ctx, http.MethodPost, PathLogin, req, &out)
}

// WhoAmI describes the client certificate the HTTP client presents.
func (c *Client) WhoAmI(ctx context.Context) (WhoAmIResponse, error) {
	var out WhoAmIResponse
	return out, c.Do(ctx, http.MethodGet, PathWhoAmI, nil, &out)
}

// Clusters lists the clusters the caller may reach.
func (c *Client) Clusters(ctx context.Context) ([]Cluster, error) {
	var out ClustersResponse
	return out.Clusters, c.Do(ctx, http.MethodGet, PathClusters, nil, &out)
}

// ListUsers lists local users (admin).
func (c *Client) ListUsers(ctx context.Context) ([]users.User, error) {
	var out []users.User
	return out, c.Do(ctx, http.MethodGet, PathUsers, nil, &out)
}

// AddUser creates a local user (admin).
func (c *Client) AddUser(ctx context.Context, req UserRequest) error {
	return c.Do(ctx, http.MethodPost, PathUsers, req, nil)
}

// RemoveUser deletes a local user (admin).
func (c *Client) RemoveUser(ctx context.Context, name string) error {
	return c.Do(ctx, http.MethodDelete, PathUsers+"/"+url.PathEscape(name), nil, nil)
}

// SetPassword replaces a local user's password (admin).
func (c *Client) SetPassword(ctx context.Context, name, password string) error {
	return c.Do(ctx, http.MethodPut, PathUsers+"/"+url.PathEscape(name)+"/password", PasswordRequest{Password: password}, nil)
}

// CreateToken makes a join token (admin).
func (c *Client) CreateToken(ctx context.Context, req TokenRequest) (TokenResponse, error) {
	var out TokenResponse
	return out, c.Do(ctx, http.MethodPost, PathTokens, req, &out)
}

// ListTokens lists join tokens without their secrets (admin).
func (c *Client) ListTokens(ctx context.Context) ([]enroll.TokenInfo, error) {
	var out []enroll.TokenInfo
	return out, c.Do(ctx, http.MethodGet, PathTokens, nil, &out)
}
