// Package kpath is the one parser for Kubernetes request paths through Limen
// (DESIGN.md §2). The proxy, the worker's classifier, audit and the forwarder
// all use the Path it returns, so the path that is checked and recorded is
// byte for byte the path the API server receives.
//
// Nothing is normalized: a path that has any other spelling of itself is
// refused (the caller answers 400). The rules, on the escaped form:
//
//   - it starts with "/"; no segment is empty, but it may end in exactly one
//     "/" ("/version/", which the clients generated from the API's OpenAPI
//     document ask for). The API server reads such a path as the path
//     without it (RequestInfoFactory trims slashes before it splits), and
//     so do Limen's classifier and scope; it is forwarded and audited as
//     received, so the path checked, recorded and sent is still one. The
//     root "/" is the path that is only a slash; "//" anywhere is refused;
//   - no empty, "." or ".." segment, and no segment ending in "." ("foo.",
//     "..."): some servers and file systems drop trailing dots, and no
//     Kubernetes group, version, resource or DNS name ends in one, so such a
//     segment can only be an attempt to make two readers disagree. Leading
//     dots stay allowed ("/.well-known/openid-configuration");
//   - raw bytes are only RFC 3986 pchar: letters, digits, "-._~",
//     "!$&'()*+,;=", ":" and "@". Backslash, control bytes, NUL, space,
//     non-ASCII and characters such as `"<>[]{}|^` are refused;
//   - a percent escape is "%" and two upper-case hex digits; it may not
//     encode "/", "\", "%", a control byte or a non-ASCII byte (in any case:
//     %2F and %2f alike), nor a character that needs no escape (%2E for ".",
//     %41 for "A"): such an escape is a second spelling of the same path.
//     Lower-case hex digits ("%3a") are refused for the same reason.
//
// Escapes that remain (for example %3A or %20) decode to one byte each and
// never to "/", so the escaped and decoded forms have the same segments.
package kpath

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// MaxLen bounds the escaped path, without the proxy prefix and query.
const MaxLen = 8 << 10

// Prefix starts every proxied Kubernetes path: /k8s/CLUSTER/...
const Prefix = "/k8s/"

// ErrNotCanonical is wrapped by every refusal; callers answer 400.
var ErrNotCanonical = errors.New("path is not canonical")

// Path is a canonical request path. The zero value is not valid; use Parse.
type Path struct {
	escaped string
	decoded string
}

// String returns the escaped path: the bytes that are forwarded and audited.
func (p Path) String() string { return p.escaped }

// Decoded returns the path with its escapes decoded, as http.Request.URL.Path
// holds it and as RequestInfoFactory reads it.
func (p Path) Decoded() string { return p.decoded }

// Segments returns the decoded segments, without the leading empty one nor
// the one a trailing slash leaves, as RequestInfoFactory reads them. The
// root path has none.
func (p Path) Segments() []string {
	if p.decoded == "/" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(p.decoded[1:], "/"), "/")
}

// SetURL points u at p, setting both Path and RawPath so that u.EscapedPath()
// and therefore the request line sent upstream is exactly p.String(). The
// query is left alone.
func (p Path) SetURL(u *url.URL) {
	u.Path = p.decoded
	u.RawPath = p.escaped
}

// Parse checks that escaped is canonical and returns it as a Path.
func Parse(escaped string) (Path, error) {
	if err := check(escaped); err != nil {
		return Path{}, fmt.Errorf("path %q: %w: %w", clip(escaped), err, ErrNotCanonical)
	}
	decoded, err := url.PathUnescape(escaped)
	if err != nil { // unreachable after check; kept so a future rule change fails closed
		return Path{}, fmt.Errorf("path %q: %w: %w", clip(escaped), err, ErrNotCanonical)
	}
	return Path{escaped: escaped, decoded: decoded}, nil
}

func check(s string) error {
	switch {
	case s == "":
		return errors.New("empty")
	case len(s) > MaxLen:
		return fmt.Errorf("%d bytes, longer than %d", len(s), MaxLen)
	case s[0] != '/':
		return errors.New("does not start with /")
	case s == "/":
		return nil
	}
	// One trailing slash, after a non-empty last segment: the segments
	// checked are those before it ("//" leaves an empty one, refused).
	for i, seg := range strings.Split(strings.TrimSuffix(s[1:], "/"), "/") {
		if err := checkSegment(seg); err != nil {
			return fmt.Errorf("segment %d: %w", i+1, err)
		}
	}
	return nil
}

func checkSegment(seg string) error {
	switch {
	case seg == "":
		return errors.New("empty segment (//)")
	case seg == "." || seg == "..":
		return fmt.Errorf("dot segment %q", seg)
	case seg[len(seg)-1] == '.':
		return fmt.Errorf("segment %q ends with a dot", clip(seg))
	}
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		switch {
		case c == '%':
			if err := checkEscape(seg[i:]); err != nil {
				return err
			}
			i += 2
		case c == '\\':
			return errors.New("backslash")
		case c < 0x20 || c == 0x7f:
			return fmt.Errorf("control byte 0x%02x", c)
		case c >= 0x80:
			return fmt.Errorf("non-ASCII byte 0x%02x", c)
		case !pchar(c):
			return fmt.Errorf("character %q must be percent-encoded", c)
		}
	}
	return nil
}

// checkEscape checks the escape at the start of s ("%XY...").
func checkEscape(s string) error {
	if len(s) < 3 || !isHex(s[1]) || !isHex(s[2]) {
		return fmt.Errorf("invalid percent escape %q", clip(s[:min(len(s), 3)]))
	}
	esc := s[:3]
	b := unhex(s[1])<<4 | unhex(s[2])
	switch {
	case b == '/':
		return fmt.Errorf("percent-encoded slash %s", esc)
	case b == '\\':
		return fmt.Errorf("percent-encoded backslash %s", esc)
	case b == '%':
		return fmt.Errorf("percent-encoded percent sign %s", esc)
	case b == '.':
		return fmt.Errorf("percent-encoded dot %s", esc)
	case b < 0x20 || b == 0x7f:
		return fmt.Errorf("percent-encoded control byte %s", esc)
	case b >= 0x80:
		return fmt.Errorf("percent-encoded non-ASCII byte %s", esc)
	case unreserved(b):
		return fmt.Errorf("%s encodes %q, which must be written as is", esc, b)
	case s[1] >= 'a' || s[2] >= 'a':
		return fmt.Errorf("percent escape %s must use upper-case hex digits", esc)
	}
	return nil
}

// unreserved reports RFC 3986 unreserved characters.
func unreserved(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// pchar reports characters allowed unescaped in a path segment (RFC 3986
// pchar without pct-encoded).
func pchar(c byte) bool {
	return unreserved(c) || strings.IndexByte("!$&'()*+,;=:@", c) >= 0
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

// SplitProxyPath splits an escaped "/k8s/CLUSTER/rest" into the cluster name
// and the canonical rest. "/k8s/CLUSTER" and "/k8s/CLUSTER/" both give the
// root path "/".
func SplitProxyPath(escaped string) (cluster string, rest Path, err error) {
	after, ok := strings.CutPrefix(escaped, Prefix)
	if !ok {
		return "", Path{}, fmt.Errorf("path %q does not start with %s: %w", clip(escaped), Prefix, ErrNotCanonical)
	}
	cluster, tail, _ := strings.Cut(after, "/")
	if err := ValidCluster(cluster); err != nil {
		return "", Path{}, fmt.Errorf("%w: %w", err, ErrNotCanonical)
	}
	rest, err = Parse("/" + tail)
	if err != nil {
		return "", Path{}, err
	}
	return cluster, rest, nil
}

// FromRequest splits r's target into cluster and canonical path. It reads
// r.RequestURI, the request target exactly as the client sent it, rather than
// r.URL: net/http has already decoded URL.Path and re-encodes
// URL.EscapedPath() whenever the client's spelling is not one Go would
// produce, which would hide exactly the spellings this package must refuse.
// The query (after the first "?") is not part of the path; the caller
// forwards r.URL.RawQuery unchanged. Absolute-form and "*" targets are
// refused. For a client-side request (RequestURI empty, as in tests)
// r.URL.RequestURI() is used.
//
// serverCluster is the cluster the connection's TLS server name names
// (ClusterFromServerName), or "" when it names none. Then:
//
//   - "": the target must be /k8s/CLUSTER/…, and CLUSTER is the cluster;
//   - a name: the whole target is the Kubernetes path on that cluster, so
//     that clients which drop the server URL's path (kubectl get --raw,
//     kubectl proxy) reach it; a target /k8s/CLUSTER/… is still split (a
//     kubeconfig written before server-name routing, with a server name
//     added), and CLUSTER must be serverCluster: two names for the
//     cluster are ErrClusterMismatch, never a choice between them.
//
// Either way the Path returned is the one parse of the target: what is
// checked, audited and forwarded.
func FromRequest(r *http.Request, serverCluster string) (cluster string, p Path, err error) {
	target := r.RequestURI
	if target == "" && r.URL != nil {
		target = r.URL.RequestURI()
	}
	path, _, _ := strings.Cut(target, "?")
	if serverCluster == "" {
		return SplitProxyPath(path)
	}
	if err := ValidCluster(serverCluster); err != nil {
		return "", Path{}, fmt.Errorf("TLS server name: %w: %w", err, ErrNotCanonical)
	}
	if !strings.HasPrefix(path, Prefix) {
		p, err := Parse(path)
		return serverCluster, p, err
	}
	cluster, p, err = SplitProxyPath(path)
	if err != nil {
		return "", Path{}, err
	}
	if cluster != serverCluster {
		return "", Path{}, fmt.Errorf("the TLS server name names cluster %q and the path names cluster %q: %w",
			serverCluster, cluster, ErrClusterMismatch)
	}
	return cluster, p, nil
}

// ErrClusterMismatch is returned when a connection's TLS server name and its
// request path name different clusters; callers answer 400.
var ErrClusterMismatch = errors.New("server name and path name different clusters")

// ServerNameLabel is the label between the cluster and the proxy's name in
// a server name that routes to a cluster: CLUSTER.kube.PROXY.
const ServerNameLabel = "kube"

// ServerName is the TLS server name that routes to cluster on the proxy
// named proxyName (a DNS name or an IP address, as the client dials it):
// "CLUSTER.kube.PROXY". The proxy's serving certificate covers it with the
// wildcard "*.kube.PROXY", so no DNS record is needed: the client dials the
// proxy's address and only presents this name.
func ServerName(cluster, proxyName string) string {
	return cluster + "." + ServerNameLabel + "." + strings.ToLower(proxyName)
}

// ClusterFromServerName returns the cluster that serverName names on a
// proxy known by proxyNames ("CLUSTER.kube.PROXY" with PROXY among them,
// compared without case, as DNS names are), and whether it names one. The
// cluster it returns is not validated: FromRequest refuses an invalid one,
// so that "a.b.kube.PROXY" is a refusal rather than the proxy's own routes.
func ClusterFromServerName(serverName string, proxyNames []string) (string, bool) {
	sn := strings.ToLower(strings.TrimSuffix(serverName, "."))
	for _, n := range proxyNames {
		if c, ok := strings.CutSuffix(sn, "."+ServerNameLabel+"."+strings.ToLower(n)); ok && c != "" {
			return c, true
		}
	}
	return "", false
}

// ValidCluster reports whether name is a cluster name: a DNS-1123 label
// (1–63 lowercase letters, digits and dashes, starting and ending with a
// letter or digit).
func ValidCluster(name string) error {
	if len(name) == 0 || len(name) > 63 {
		return fmt.Errorf("cluster name %q must be 1 to 63 characters", clip(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (c != '-' || i == 0 || i == len(name)-1) {
			return fmt.Errorf("cluster name %q: only lowercase letters, digits and inner dashes are allowed", clip(name))
		}
	}
	return nil
}

// clip shortens attacker-controlled strings before they reach error messages.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
