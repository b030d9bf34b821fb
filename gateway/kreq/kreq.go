// Package kreq is what the proxy and worker do to a Kubernetes request
// besides forwarding it: classify it the way the API server will, strip every
// identity header the client sent, and set the impersonation headers from a
// verified grant.
package kreq

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/limenhq/limen/gateway/kpath"
)

// Info is a request as the API server's authorizer sees it (DESIGN.md §3).
type Info struct {
	// IsResourceRequest is false for discovery and other non-resource URLs,
	// whose Verb is then the lower-case HTTP method.
	IsResourceRequest bool   `json:"is_resource_request"`
	Verb              string `json:"verb"`
	APIGroup          string `json:"api_group,omitempty"`
	APIVersion        string `json:"api_version,omitempty"`
	Resource          string `json:"resource,omitempty"`
	Subresource       string `json:"subresource,omitempty"`
	Namespace         string `json:"namespace,omitempty"`
	Name              string `json:"name,omitempty"`
}

// Classify classifies r as the API server would, reading the path from p
// (never from r.URL.Path, so the classified path is the canonical one) and
// the query from r.URL.RawQuery (watch=true, fieldSelector=metadata.name=…).
// r is not modified.
func Classify(r *http.Request, p kpath.Path) (Info, error) {
	factory := request.RequestInfoFactory{
		APIPrefixes:          sets.NewString("api", "apis"),
		GrouplessAPIPrefixes: sets.NewString("api"),
	}
	u := &url.URL{RawQuery: r.URL.RawQuery}
	p.SetURL(u)
	shallow := *r
	shallow.URL = u
	ri, err := factory.NewRequestInfo(&shallow)
	if err != nil {
		return Info{}, fmt.Errorf("classify %s %s: %w", r.Method, p, err)
	}
	return Info{
		IsResourceRequest: ri.IsResourceRequest,
		Verb:              ri.Verb,
		APIGroup:          ri.APIGroup,
		APIVersion:        ri.APIVersion,
		Resource:          ri.Resource,
		Subresource:       ri.Subresource,
		Namespace:         ri.Namespace,
		Name:              ri.Name,
	}, nil
}

// IsIdentityHeader reports whether name (in any case) is a header the client
// may not set: Authorization, Impersonate-*, X-Remote-* or X-Limen-*.
func IsIdentityHeader(name string) bool {
	if strings.EqualFold(name, "authorization") {
		return true
	}
	// Prefixes that carry identity to the API server (impersonation,
	// request-header authentication) or to Limen itself.
	for _, p := range [...]string{"impersonate-", "x-remote-", "x-limen-"} {
		if len(name) >= len(p) && strings.EqualFold(name[:len(p)], p) {
			return true
		}
	}
	return false
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

// Header names set by Impersonate.
const (
	HeaderUser    = "Impersonate-User"
	HeaderGroup   = "Impersonate-Group"
	HeaderSession = "Impersonate-Extra-Limen-Session"
)

// ErrSystemGroup refuses a "system:" group, which Limen never impersonates.
var ErrSystemGroup = errors.New("system: groups are never impersonated")

// Impersonate strips every identity header from h and then sets
// Impersonate-User, one Impersonate-Group per group and
// Impersonate-Extra-Limen-Session (the API server lower-cases the extra key,
// so the cluster sees "limen-session"). It refuses empty or unprintable
// values, a "system:" user or group, and an empty group list; on error h has
// been stripped but carries no impersonation headers, so a caller that
// forwards anyway sends the request as the worker itself, never as the
// client.
func Impersonate(h http.Header, user string, groups []string, session string) error {
	StripIdentity(h)
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
	h[HeaderSession] = []string{session}
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
