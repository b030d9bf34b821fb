package authapi

import (
	"context"
	"net/http"
	"net/url"

	"github.com/limenhq/limen/gateway/enroll"
	"github.com/limenhq/limen/gateway/internal/apihttp"
	"github.com/limenhq/limen/gateway/users"
)

// Client calls the identity API of one proxy. Build it from an
// apihttp.Client (gateway/profile does), or use Profile.Client.
type Client struct{ apihttp.Client }

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
