// Package impersonate is the header hygiene both hops apply: every identity
// header a client sent is deleted, and the worker sets the impersonation
// headers from a verified grant, under the Kubernetes user name Config.User
// gives the principal (identity.go).
package impersonate

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/limenhq/limen/gateway/identity"
)

// IsIdentityHeader reports whether name (in any case) is a header the client
// may not set: Authorization, Impersonate-*, X-Remote-* or X-Limen-*, which
// say who the caller is, and Forwarded, X-Forwarded-* or X-Real-Ip, which say
// where the caller is (the API server's audit log takes its source IPs from
// X-Forwarded-For; the worker sets it from the grant, see SetForwardedFor).
func IsIdentityHeader(name string) bool {
	for _, n := range [...]string{"authorization", "forwarded", "x-real-ip"} {
		if strings.EqualFold(name, n) {
			return true
		}
	}
	// Prefixes that carry identity to the API server (impersonation,
	// request-header authentication), to Limen itself, or a client address.
	for _, p := range [...]string{"impersonate-", "x-remote-", "x-limen-", "x-forwarded-"} {
		if len(name) >= len(p) && strings.EqualFold(name[:len(p)], p) {
			return true
		}
	}
	return false
}

// HeaderForwardedFor carries the client's address to the API server.
const HeaderForwardedFor = "X-Forwarded-For"

// SetForwardedFor sets X-Forwarded-For to the host of clientAddr, the
// caller's address as the proxy saw it (host:port, from the verified grant),
// so that the cluster's audit log shows the real client rather than the
// worker. Any other forwarding header must already be stripped. An address
// that is not an IP (with or without a port) sets nothing.
func SetForwardedFor(h http.Header, clientAddr string) {
	ip, err := netip.ParseAddr(clientAddr)
	if ap, perr := netip.ParseAddrPort(clientAddr); perr == nil {
		ip, err = ap.Addr(), nil
	}
	if err != nil {
		return
	}
	h[HeaderForwardedFor] = []string{ip.Unmap().String()}
}

// StripIdentity deletes every identity header from h, whatever the case of
// its key (net/http canonicalizes keys it parses, but a map built by hand or
// by another library may hold "impersonate-user" or "IMPERSONATE-GROUP" next
// to the canonical form) and however many values it has. It returns the
// names it deleted, for logging; never log their values.
func StripIdentity(h http.Header) []string {
	var removed []string
	for k := range h {
		if IsIdentityHeader(k) {
			removed = append(removed, k)
			delete(h, k)
		}
	}
	return removed
}

// Header names set by Config.Set; the session extra's depends on the Mode
// (see SessionExtra).
const (
	HeaderUser  = "Impersonate-User"
	HeaderGroup = "Impersonate-Group"
)

// ErrSystemGroup refuses a "system:" group, which Limen never impersonates.
var ErrSystemGroup = errors.New("system: groups are never impersonated")

// Set strips every identity header from h and then sets Impersonate-User
// (p's Kubernetes user name, see User), one Impersonate-Group per group and
// the session id as the extra SessionExtra. It refuses a principal User
// refuses, empty or unprintable values, a "system:" user or group, and an
// empty group list; on error h has been stripped but carries no
// impersonation headers, so a caller that forwards anyway sends the request
// as the worker itself, never as the client.
func (c Config) Set(h http.Header, p identity.Principal, groups []string, session string) error {
	StripIdentity(h)
	user, err := c.User(p)
	if err != nil {
		return err
	}
	if err := headerValue("user", user); err != nil {
		return err
	}
	if strings.HasPrefix(user, "system:") {
		return fmt.Errorf("impersonate user %q: %w", user, ErrSystemGroup)
	}
	if len(groups) == 0 {
		return errors.New("impersonate: no groups")
	}
	for _, g := range groups {
		if err := headerValue("group", g); err != nil {
			return err
		}
		if strings.HasPrefix(g, "system:") {
			return fmt.Errorf("impersonate group %q: %w", g, ErrSystemGroup)
		}
	}
	if err := headerValue("session", session); err != nil {
		return err
	}
	h[HeaderUser] = []string{user}
	h[HeaderGroup] = append([]string(nil), groups...)
	h[c.sessionHeader()] = []string{session}
	return nil
}

func headerValue(what, v string) error {
	if v == "" {
		return fmt.Errorf("impersonate: empty %s", what)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] == 0x7f {
			return fmt.Errorf("impersonate: %s %q contains a control byte", what, v)
		}
	}
	return nil
}
