// Package scope is the per-client scope list of DESIGN.md §7: what a client
// (an application, the console) may do with a user's credential, on top of
// and never beyond what RBAC lets the user do.
//
// The list lives in policy data (data.limen.config.clients, schema in
// policies/README.md). Parse validates it and compiles it into a Set when a
// bundle activates, so that a request is matched by plain Go comparisons,
// not by Rego: Scope.Allows allocates nothing. Both hops match each request
// against their own policy snapshot's Set.
//
// The matcher reads the request as the API server classified it
// (reqinfo.Info, from the one canonical path kpath parsed), so the verb is
// the request's, not its method's: a watch is not a list and deleting a
// collection is not deleting an object. Where the API server checks more
// than the classified verb (create as well as get for the WebSocket upgrade
// of exec, attach and port-forward), so does the matcher: the scope of a
// stream is decided with the API server's verbs, whatever its transport.
package scope

import (
	"github.com/limenhq/limen/gateway/reqinfo"
)

// Reason is the Status reason of a refusal for being out of scope, so that a
// client can tell it from Kubernetes' own Forbidden.
const Reason = "OutsideLimenScope"

// Phrase is what every out-of-scope refusal says.
const Phrase = "outside this client's Limen scope"

// DeniedReason is the auth.denied reason prefix of an out-of-scope refusal.
const DeniedReason = "scope"

// Set is every client's compiled scope from one bundle. It is immutable.
type Set struct {
	clients map[string]*Scope
}

// Client returns the scope of a registered client; ok is false for a
// client the policy does not register, which gets nothing.
func (s *Set) Client(name string) (sc *Scope, ok bool) {
	if s == nil {
		return nil, false
	}
	sc, ok = s.clients[name]
	return sc, ok
}

// Names returns the registered clients, for status and tests.
func (s *Set) Names() []string {
	if s == nil {
		return nil
	}
	out := make([]string, 0, len(s.clients))
	for n := range s.clients {
		out = append(out, n)
	}
	return out
}

// Scope is one client's compiled scope. A nil *Scope allows nothing.
type Scope struct {
	// Client is the client's name.
	Client string
	// UserPrefix, if set, goes before the user's name when Limen
	// impersonates them through this client (per-client identity, §7).
	UserPrefix string
	unscoped   bool
	rules      []rule
	urls       []urlRule
}

// Unscoped reports whether the policy explicitly leaves the client to
// Kubernetes alone.
func (sc *Scope) Unscoped() bool { return sc != nil && sc.unscoped }

// Unrestricted returns a scope that allows every request, for a client the
// policy declares unscoped and for tests of other layers.
func Unrestricted(client string) *Scope { return &Scope{Client: client, unscoped: true} }

// verb is a bit per Kubernetes verb RequestInfo produces.
type verb uint16

const (
	verbGet verb = 1 << iota
	verbList
	verbWatch
	verbCreate
	verbUpdate
	verbPatch
	verbDelete
	verbDeleteCollection
	verbAll = verbGet | verbList | verbWatch | verbCreate | verbUpdate | verbPatch | verbDelete | verbDeleteCollection
)

// verbBit maps a classified verb to its bit; an unknown verb (proxy,
// connect or anything the API server grows) has none, so no entry allows it.
func verbBit(v string) verb {
	switch v {
	case "get":
		return verbGet
	case "list":
		return verbList
	case "watch":
		return verbWatch
	case "create":
		return verbCreate
	case "update":
		return verbUpdate
	case "patch":
		return verbPatch
	case "delete":
		return verbDelete
	case "deletecollection":
		return verbDeleteCollection
	}
	return 0
}

// rule is one compiled entry of the list.
type rule struct {
	group, version, resource string
	// subresources the entry covers besides the resource itself; none
	// means only the resource.
	subresources []string
	// anyNamespace covers every namespace and requests outside any;
	// otherwise namespaces lists the namespaces covered, and an entry with
	// none covers only requests outside any namespace (cluster-scoped
	// resources, lists across all namespaces).
	anyNamespace bool
	namespaces   []string
	verbs        verb
}

// urlRule is a non-resource URL: exact, or every path under prefix when
// it ends in "*" (as in RBAC's nonResourceURLs).
type urlRule struct {
	path   string
	prefix bool
}

// Allows reports whether the scope lets the client make the request the
// API server classifies as info, on path (the canonical path, kpath), as
// forwarded. It only subtracts: an allowed request still meets RBAC.
func (sc *Scope) Allows(info *reqinfo.Info, path string) bool {
	if sc == nil || info == nil {
		return false
	}
	if sc.unscoped {
		return true
	}
	if !info.IsResourceRequest {
		// Discovery, /version, /openapi, /healthz: only what is listed, and
		// only to read. Listing one grants no resource.
		if info.Verb != "get" {
			return false
		}
		for i := range sc.urls {
			u := &sc.urls[i]
			if path == u.path || (u.prefix && len(path) >= len(u.path) && path[:len(u.path)] == u.path) {
				return true
			}
		}
		return false
	}
	need := requiredVerbs(info)
	if need == 0 {
		return false
	}
	// Each verb the API server checks may come from another entry, as each
	// of its authorizations may come from another RBAC rule.
	var have verb
	for i := range sc.rules {
		if sc.rules[i].matches(info) {
			if have |= sc.rules[i].verbs & need; have == need {
				return true
			}
		}
	}
	return false
}

// requiredVerbs is every verb the API server authorizes for the request.
// That is the classified verb, and for a GET of pods/exec, pods/attach or
// pods/portforward also create: a WebSocket upgrade (kubectl 1.30 and
// later) is a GET, which RequestInfo calls get, and kube-apiserver 1.35
// and later then checks create too, in the subresource's handler (feature
// gate AuthorizePodWebsocketUpgradeCreatePermission, on by default). Over
// SPDY the same stream is a POST, classified create: one verb. An older
// API server, or one with the gate off, opens the upgrade on get alone;
// the scope asks for create all the same, the verb RBAC authors write for
// exec, so that listing get never opens a stream that create would not.
func requiredVerbs(info *reqinfo.Info) verb {
	bit := verbBit(info.Verb)
	if bit == verbGet && isConnect(info) {
		bit |= verbCreate
	}
	return bit
}

// isConnect reports whether info names a pods subresource that opens a
// stream (exec, attach, portforward), which the API server authorizes as
// create whatever the transport.
func isConnect(info *reqinfo.Info) bool {
	if info == nil || !info.IsResourceRequest || info.APIGroup != "" || info.Resource != "pods" {
		return false
	}
	switch info.Subresource {
	case "exec", "attach", "portforward":
		return true
	}
	return false
}

// matches reports whether the entry covers the request's resource,
// subresource and namespace; the verbs are Allows' business.
func (r *rule) matches(info *reqinfo.Info) bool {
	if r.resource != info.Resource || r.group != info.APIGroup || r.version != info.APIVersion {
		return false
	}
	if info.Subresource != "" && !contains(r.subresources, info.Subresource) {
		return false
	}
	if r.anyNamespace {
		return true
	}
	if info.Namespace == "" {
		return len(r.namespaces) == 0
	}
	return contains(r.namespaces, info.Namespace)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Refusal is the message of an out-of-scope refusal: what was asked, and
// that it is this client's scope, not Kubernetes, that refuses it.
func Refusal(client string, info *reqinfo.Info, path string) string {
	what := "this request"
	switch {
	case info == nil:
	case !info.IsResourceRequest:
		what = info.Verb + " " + path
	default:
		res := info.Resource
		if info.Subresource != "" {
			res += "/" + info.Subresource
		}
		gv := info.APIVersion
		if info.APIGroup != "" {
			gv = info.APIGroup + "/" + gv
		}
		verbs := info.Verb
		if requiredVerbs(info) == verbGet|verbCreate {
			verbs = "get and create" // what the API server checks for this upgrade
		}
		what = verbs + " " + res + " (" + gv + ")"
		if info.Namespace != "" {
			what += " in namespace " + info.Namespace
		}
	}
	return what + " is " + Phrase + " (client " + client + "); Kubernetes was not asked. " +
		"Use a client whose scope lists it, such as kubectl, or ask your Limen administrator"
}

// Kind is a resource (and the subresources) one scope entry lists, for
// "what may I do".
type Kind struct {
	Group, Version, Resource string
	Subresources             []string
}

// Kinds lists the resources the scope's entries name, in list order.
func (sc *Scope) Kinds() []Kind {
	if sc == nil {
		return nil
	}
	out := make([]Kind, 0, len(sc.rules))
	for _, r := range sc.rules {
		out = append(out, Kind{Group: r.group, Version: r.version, Resource: r.resource, Subresources: r.subresources})
	}
	return out
}
