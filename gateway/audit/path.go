package audit

import "strings"

// MaxRequestPath bounds the path RequestPath keeps, so that one event never
// grows past the wire limit whatever a client sends.
const MaxRequestPath = 1024

// RequestPath is the path an event records for a request refused before
// its path was parsed (auth.denied, or a kube.request for a path that is not
// canonical): the request target as the client sent it, without query or
// fragment (audit records no query strings), at most MaxRequestPath bytes,
// valid UTF-8, and "/" rather than empty. Both hops use it, so a refusal
// reads the same whichever hop made it.
func RequestPath(requestURI string) string {
	p, _, _ := strings.Cut(requestURI, "?")
	p, _, _ = strings.Cut(p, "#")
	if len(p) > MaxRequestPath {
		p = p[:MaxRequestPath]
	}
	if p == "" {
		return "/"
	}
	return strings.ToValidUTF8(p, "\uFFFD")
}
