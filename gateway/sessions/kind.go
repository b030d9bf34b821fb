package sessions

import (
	"net/url"
	"strings"

	"github.com/limenhq/limen/gateway/kreq"
)

// KindOf says whether a classified request is a long-lived stream that lock,
// kill and grant expiry must be able to end, and which kind; short requests
// return false. Both hops use it, so they agree on what is a session.
func KindOf(info kreq.Info, query url.Values) (Kind, string, bool) {
	target := info.Namespace + "/" + info.Name
	switch {
	case info.Subresource == "exec":
		return KindExec, target + "/" + query.Get("container"), true
	case info.Subresource == "attach":
		return KindAttach, target + "/" + query.Get("container"), true
	case info.Subresource == "portforward":
		return KindPortForward, target, true
	case info.Verb == "watch":
		return KindWatch, strings.TrimSuffix(info.Namespace+"/"+info.Resource, "/"), true
	case info.Subresource == "log" && (query.Get("follow") == "true" || query.Get("follow") == "1"):
		return KindLogs, target + "/" + query.Get("container"), true
	}
	return "", "", false
}
