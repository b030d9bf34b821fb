package sessions

import (
	"net/http"
	"net/url"
	"strings"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/limenhq/limen/gateway/reqinfo"
)

// Stream is what a request opens, as the API server will serve it.
type Stream struct {
	// Kind is KindNone for a request that opens no stream.
	Kind Kind
	// Target names what the stream is attached to, as `limen sessions ls`
	// shows it: namespace/pod/container for exec, attach and logs,
	// namespace/pod for port-forward, namespace/resource[/name] for a watch
	// (no namespace when cluster-wide), resource/namespace/name for proxy
	// (resource/name for nodes).
	Target string
}

// Classify says whether r opens a stream and of which kind, deciding it as
// the API server does; info is r's classification by reqinfo.Classify. The
// proxy and the worker both call it on the request they relay, so they agree
// on what is a session, and both list, audit and end the same sessions.
//
//   - exec, attach, portforward: the pods subresource, asked as an upgrade
//     (an Upgrade header: what both hops forward as an upgrade).
//   - watch: the verb the API server's RequestInfoFactory gives (watch=…
//     as its ParameterCodec decodes ListOptions, or a /watch/ path), and a
//     query that ListOptions decoding accepts: one it rejects is a 400, not
//     a stream.
//   - logs: pods/log whose query decodes, as PodLogOptions, with Follow set.
//   - proxy: pods/proxy, services/proxy and nodes/proxy, whatever they
//     answer: the response comes from a workload and may stream.
//
// The query is read as the API server reads it, with r.URL.Query():
// percent-escapes decoded, pairs that do not parse dropped, and the first
// of repeated keys winning in the converters; never by looking for
// substrings. Validation the API server runs after decoding (a negative
// tailLines, watch options it refuses) is not repeated: such a request is
// classified by its decoded options, answered with a 400, and its session
// ends at once.
func Classify(r *http.Request, info reqinfo.Info) Stream {
	if !info.IsResourceRequest {
		return Stream{}
	}
	core := info.APIGroup == ""
	switch {
	case core && info.Resource == "pods" && isUpgrade(r.Header) &&
		(info.Subresource == "exec" || info.Subresource == "attach" || info.Subresource == "portforward"):
		target := info.Namespace + "/" + info.Name
		kind := Kind(info.Subresource)
		if kind != KindPortForward {
			target += "/" + r.URL.Query().Get("container")
		}
		return Stream{Kind: kind, Target: target}
	case core && info.Subresource == "proxy" &&
		(info.Resource == "pods" || info.Resource == "services" || info.Resource == "nodes"):
		return Stream{Kind: KindProxy, Target: joinNonEmpty(info.Resource, info.Namespace, info.Name)}
	case info.Verb == "watch":
		if !decodesListOptions(r.URL.Query()) {
			return Stream{}
		}
		return Stream{Kind: KindWatch, Target: joinNonEmpty(info.Namespace, info.Resource, info.Name)}
	case core && info.Resource == "pods" && info.Subresource == "log":
		opts, err := decodePodLogOptions(r.URL.Query())
		if err != nil || !opts.Follow {
			return Stream{}
		}
		return Stream{Kind: KindLogs, Target: info.Namespace + "/" + info.Name + "/" + opts.Container}
	}
	return Stream{}
}

// isUpgrade reports whether h asks for a protocol upgrade. The worker sends
// an upgrade upstream exactly when the Upgrade header is set (it rebuilds
// Connection itself), so that is the test here too: a request the proxy
// would pass on as a plain one is then, at worst, listed for the moment its
// refusal takes.
func isUpgrade(h http.Header) bool { return h.Get("Upgrade") != "" }

// decodesListOptions reports whether the API server's list handler accepts
// q: it decodes ListOptions with this ParameterCodec and answers 400 when
// that fails.
func decodesListOptions(q url.Values) bool {
	var opts metainternalversion.ListOptions
	return metainternalversionscheme.ParameterCodec.DecodeParameters(q, metav1.SchemeGroupVersion, &opts) == nil
}

func joinNonEmpty(parts ...string) string {
	out := parts[:0:0]
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, "/")
}
