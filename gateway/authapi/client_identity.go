package authapi

import (
	"context"
	"net/http"
	"net/url"

	"github.com/limenhq/limen/gateway/bots"
)

// OIDCURL asks for the provider's authorization URL (code flow).
func (c *Client) OIDCURL(ctx context.Context, req OIDCURLRequest) (OIDCURLResponse, error) {
	var out OIDCURLResponse
	return out, c.Do(ctx, http.MethodPost, PathOIDCURL, req, &out)
}

// OIDCLogin redeems a code for a certificate.
func (c *Client) OIDCLogin(ctx context.Context, req OIDCLoginRequest) (LoginResponse, error) {
	var out LoginResponse
	return out, c.Do(ctx, http.MethodPost, PathOIDCLogin, req, &out)
}

// OIDCDevice starts a device login.
func (c *Client) OIDCDevice(ctx context.Context) (DeviceResponse, error) {
	var out DeviceResponse
	return out, c.Do(ctx, http.MethodPost, PathOIDCDevice, struct{}{}, &out)
}

// OIDCDeviceToken asks whether a device login was approved.
func (c *Client) OIDCDeviceToken(ctx context.Context, req DeviceTokenRequest) (DeviceTokenResponse, error) {
	var out DeviceTokenResponse
	return out, c.Do(ctx, http.MethodPost, PathOIDCDeviceToken, req, &out)
}

// BotLogin logs a bot in with a join secret.
func (c *Client) BotLogin(ctx context.Context, req BotLoginRequest) (LoginResponse, error) {
	var out LoginResponse
	return out, c.Do(ctx, http.MethodPost, PathBotLogin, req, &out)
}

// BotOIDCLogin logs a bot in with a CI workload's ID token.
func (c *Client) BotOIDCLogin(ctx context.Context, req BotOIDCLoginRequest) (LoginResponse, error) {
	var out LoginResponse
	return out, c.Do(ctx, http.MethodPost, PathBotOIDCLogin, req, &out)
}

// ListBots lists bots (admin).
func (c *Client) ListBots(ctx context.Context) ([]bots.Bot, error) {
	var out []bots.Bot
	return out, c.Do(ctx, http.MethodGet, PathBots, nil, &out)
}

// AddBot creates a bot (admin).
func (c *Client) AddBot(ctx context.Context, req BotRequest) error {
	return c.Do(ctx, http.MethodPost, PathBots, req, nil)
}

// RemoveBot deletes a bot and its join secrets (admin).
func (c *Client) RemoveBot(ctx context.Context, name string) error {
	return c.Do(ctx, http.MethodDelete, PathBots+"/"+url.PathEscape(name), nil, nil)
}

// BotToken makes a join secret for a bot (admin).
func (c *Client) BotToken(ctx context.Context, name string, req BotTokenRequest) (BotTokenResponse, error) {
	var out BotTokenResponse
	return out, c.Do(ctx, http.MethodPost, PathBots+"/"+url.PathEscape(name)+"/tokens", req, &out)
}
