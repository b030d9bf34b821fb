package auditexport

import (
	"crypto/sha256"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
)

// How Limen's events become the API server's audit events. Every stored
// event is exported as one audit.k8s.io/v1 Event at level Metadata (Limen
// never keeps bodies); Limen's own facts go in annotations under
// AnnotationPrefix. The mapping per type:
//
//   - kube.request: stage ResponseComplete, as the API server would log the
//     request the worker forwarded: user (the Limen principal),
//     impersonatedUser (the Kubernetes user and groups the worker used),
//     verb, objectRef, requestURI (the path as forwarded, never a query),
//     sourceIPs, userAgent, responseStatus.code and the request's
//     timestamps.
//   - kube.sent: stage RequestReceived of the same auditID: the proxy's
//     record of the request, made durable before it was forwarded. A
//     receiver that keeps only ResponseComplete (the API server's
//     omitStages) drops them; one without its ResponseComplete is a request
//     whose outcome Limen does not know.
//   - session.start / session.end: stages ResponseStarted and
//     ResponseComplete of one auditID per session, as the API server logs a
//     long-running request; the stream's facts (command, exit code, bytes,
//     recording digest, end reason) are annotations.
//   - auth.denied: stage ResponseComplete, responseStatus.code 403 and the
//     API server's own authorization.k8s.io/decision "forbid" and
//     authorization.k8s.io/reason annotations; a refusal of a client without
//     a valid certificate names the user system:anonymous, as the API server
//     does.
//   - every other event (logins, tokens, user and lock changes, kills,
//     retention runs): stage ResponseComplete, verb the action (user.lock →
//     "lock"), objectRef {apiGroup limen.dev, resource the area}, the
//     event's fields as annotations.

// AnnotationPrefix starts the key of every annotation Limen adds.
const AnnotationPrefix = "limen.dev/"

// Annotation keys of Limen's facts.
const (
	AnnotationType      = AnnotationPrefix + "event"
	AnnotationSeq       = AnnotationPrefix + "seq"
	AnnotationCluster   = AnnotationPrefix + "cluster"
	AnnotationSession   = AnnotationPrefix + "session-id"
	AnnotationClient    = AnnotationPrefix + "client"
	AnnotationLogin     = AnnotationPrefix + "login-id"
	AnnotationPrincipal = AnnotationPrefix + "principal"
	// AnnotationGrant is the groups the proxy's grant carried, which the
	// worker re-checked; impersonatedUser.groups are those it kept.
	AnnotationGrant   = AnnotationPrefix + "grant-groups"
	AnnotationMethod  = AnnotationPrefix + "method"
	AnnotationLatency = AnnotationPrefix + "latency-ms"
)

// The API server's own annotation keys for an authorization decision.
const (
	annotationDecision = "authorization.k8s.io/decision"
	annotationReason   = "authorization.k8s.io/reason"
)

// APIGroup is the objectRef.apiGroup of the events that are about Limen
// itself rather than a cluster's objects.
const APIGroup = "limen.dev"

// Map returns the audit.k8s.io/v1 Event that exports e, which must carry
// its store sequence number (e.ID).
func Map(e audit.Event) auditv1.Event {
	out := auditv1.Event{
		TypeMeta:                 metav1.TypeMeta{APIVersion: auditv1.SchemeGroupVersion.String(), Kind: "Event"},
		Level:                    auditv1.LevelMetadata,
		AuditID:                  auditID(e),
		Stage:                    auditv1.StageResponseComplete,
		User:                     user(e.Principal),
		RequestReceivedTimestamp: metav1.NewMicroTime(e.Time),
		StageTimestamp:           metav1.NewMicroTime(e.Time),
		Annotations:              annotations(e),
	}
	if ip := sourceIP(e.ClientAddr); ip != "" {
		out.SourceIPs = []string{ip}
	}
	switch e.Type {
	case audit.TypeKubeRequest, audit.TypeKubeSent:
		mapKube(&out, e)
	case audit.TypeSessionStart, audit.TypeSessionEnd:
		mapSession(&out, e)
	case audit.TypeAuthDenied:
		mapDenied(&out, e)
	default:
		mapOther(&out, e)
	}
	return out
}

func mapKube(out *auditv1.Event, e audit.Event) {
	k := e.Kube
	if k == nil { // Validate refuses it; a corrupt row still exports what it has
		k = &audit.KubeRequest{}
	}
	out.Verb = k.Verb
	if out.Verb == "" {
		// Not classified (refused before): the API server's verb for a
		// request it cannot classify is the method in lower case.
		out.Verb = strings.ToLower(k.Method)
	}
	out.RequestURI = k.Path
	out.UserAgent = k.UserAgent
	out.ImpersonatedUser = impersonated(e)
	if k.Resource != "" {
		out.ObjectRef = &auditv1.ObjectReference{Resource: k.Resource, Subresource: k.Subresource, Namespace: k.Namespace,
			Name: k.Name, APIGroup: k.APIGroup, APIVersion: k.APIVersion}
	}
	set(out.Annotations, AnnotationMethod, k.Method)
	if e.Type == audit.TypeKubeSent {
		out.Stage = auditv1.StageRequestReceived
		return
	}
	out.RequestReceivedTimestamp = metav1.NewMicroTime(e.Time.Add(-k.Latency))
	out.ResponseStatus = &metav1.Status{Code: int32(k.Status)}
	set(out.Annotations, AnnotationLatency, strconv.FormatInt(k.Latency.Milliseconds(), 10))
}

func mapSession(out *auditv1.Event, e audit.Event) {
	s := e.Session
	if s == nil {
		s = &audit.Session{}
	}
	out.Verb = s.Login
	out.ImpersonatedUser = impersonated(e)
	if s.Pod != "" {
		out.ObjectRef = &auditv1.ObjectReference{Resource: "pods", Namespace: s.Namespace, Name: s.Pod, APIVersion: "v1",
			Subresource: podSubresource(s.Login)}
	}
	a := out.Annotations
	set(a, AnnotationPrefix+"kind", s.Kind)
	set(a, AnnotationPrefix+"target", s.Target)
	set(a, AnnotationPrefix+"container", s.Container)
	if len(s.Command) > 0 {
		set(a, AnnotationPrefix+"command", strings.Join(s.Command, " "))
	}
	set(a, AnnotationPrefix+"ports", strings.Join(s.Ports, ","))
	if e.Type == audit.TypeSessionStart {
		out.Stage = auditv1.StageResponseStarted
		return
	}
	if s.Duration > 0 {
		out.RequestReceivedTimestamp = metav1.NewMicroTime(e.Time.Add(-s.Duration))
	}
	if s.ExitCode != nil {
		set(a, AnnotationPrefix+"exit-code", strconv.Itoa(*s.ExitCode))
	}
	set(a, AnnotationPrefix+"bytes-in", strconv.FormatInt(s.BytesIn, 10))
	set(a, AnnotationPrefix+"bytes-out", strconv.FormatInt(s.BytesOut, 10))
	set(a, AnnotationPrefix+"duration-ms", strconv.FormatInt(s.Duration.Milliseconds(), 10))
	set(a, AnnotationPrefix+"recording-sha256", s.RecordingSHA256)
	set(a, AnnotationPrefix+"end-reason", s.EndReason)
	set(a, AnnotationPrefix+"end-detail", s.EndDetail)
	set(a, AnnotationPrefix+"end-hop", s.EndHop)
}

// podSubresource is the pods subresource a stream of this login kind is.
func podSubresource(login string) string {
	switch login {
	case "exec", "attach", "portforward":
		return login
	case "logs":
		return "log"
	}
	return ""
}

func mapDenied(out *auditv1.Event, e audit.Event) {
	d := e.Denied
	if d == nil {
		d = &audit.Denied{}
	}
	out.Verb = d.Action
	out.RequestURI = audit.RequestPath(d.Path)
	out.ResponseStatus = &metav1.Status{Code: 403, Status: metav1.StatusFailure, Reason: metav1.StatusReasonForbidden}
	if e.Principal.Name == "" {
		out.User = authnv1.UserInfo{Username: "system:anonymous", Groups: []string{"system:unauthenticated"}}
	}
	a := out.Annotations
	a[annotationDecision] = "forbid"
	set(a, annotationReason, d.Reason)
	set(a, AnnotationPrefix+"hop", d.Hop)
	set(a, AnnotationPrefix+"action", d.Action)
	if d.Count > 1 {
		set(a, AnnotationPrefix+"count", strconv.Itoa(d.Count))
	}
	addFields(a, e.Fields)
}

func mapOther(out *auditv1.Event, e audit.Event) {
	area, action, _ := strings.Cut(string(e.Type), ".")
	out.Verb = action
	out.ObjectRef = &auditv1.ObjectReference{APIGroup: APIGroup, Resource: area}
	if name := e.Fields["user"]; name != "" && (area == "user") {
		out.ObjectRef.Name = name
	}
	out.ResponseStatus = &metav1.Status{Code: 200}
	addFields(out.Annotations, e.Fields)
}

// user is the Limen principal as the API server names users: a user by its
// name, a bot as bot:NAME (the names Limen impersonates them as, without a
// prefix); the principal's traits are its extra, under limen.dev/trait-.
func user(p identity.Principal) authnv1.UserInfo {
	var u authnv1.UserInfo
	switch p.Kind {
	case identity.KindUser:
		u.Username = p.Name
	case identity.KindBot:
		u.Username = "bot:" + p.Name
	default:
		u.Username = p.Name
	}
	if len(p.Traits) > 0 {
		u.Extra = map[string]authnv1.ExtraValue{}
		for k, vs := range p.Traits {
			u.Extra[AnnotationPrefix+"trait-"+annotationName(k)] = slices.Clone(vs)
		}
	}
	return u
}

// impersonated is who the worker presented to the API server: the user
// name it impersonated (empty from a worker that predates reporting it,
// which impersonates with the prefix it was configured with) and the
// groups it kept.
func impersonated(e audit.Event) *authnv1.UserInfo {
	if e.KubeUser == "" && len(e.Groups) == 0 {
		return nil
	}
	return &authnv1.UserInfo{Username: e.KubeUser, Groups: slices.Clone(e.Groups)}
}

func annotations(e audit.Event) map[string]string {
	a := map[string]string{AnnotationType: string(e.Type)}
	if e.ID != 0 {
		a[AnnotationSeq] = strconv.FormatInt(e.ID, 10)
	}
	set(a, AnnotationCluster, e.Cluster)
	set(a, AnnotationSession, e.SessionID)
	set(a, AnnotationClient, e.Principal.ClientID)
	set(a, AnnotationLogin, e.Principal.LoginID)
	if e.Principal.Name != "" {
		a[AnnotationPrincipal] = e.Principal.String()
	}
	if e.Type == audit.TypeKubeSent && len(e.Groups) > 0 {
		// The proxy's record carries the grant's groups, before the
		// worker's re-check.
		a[AnnotationGrant] = strings.Join(e.Groups, ",")
	}
	return a
}

func addFields(a map[string]string, fields map[string]string) {
	for k, v := range fields {
		key := AnnotationPrefix + annotationName(k)
		if _, taken := a[key]; !taken {
			a[key] = v
		}
	}
}

func set(a map[string]string, k, v string) {
	if v != "" {
		a[k] = v
	}
}

var notNameByte = regexp.MustCompile(`[^a-z0-9.-]+`)

// annotationName makes a field or trait name a valid name part of an
// annotation key: lower case, '_' and other bytes as '-', at most 63 bytes.
func annotationName(k string) string {
	k = strings.Trim(notNameByte.ReplaceAllString(strings.ToLower(k), "-"), "-.")
	if len(k) > 63 {
		k = strings.Trim(k[:63], "-.")
	}
	if k == "" {
		k = "field"
	}
	return k
}

// auditID names an exported event stably across redeliveries, so that a
// receiver can drop the duplicates at-least-once delivery brings: the
// request's stages share one (derived from its random session id), a
// session's start and end another, and every other event has its own
// (from its sequence number and time).
func auditID(e audit.Event) types.UID {
	var seed string
	switch {
	case e.SessionID != "" && (e.Type == audit.TypeKubeRequest || e.Type == audit.TypeKubeSent ||
		e.Type == audit.TypeAuthDenied && e.Denied != nil && e.Denied.Hop == audit.HopWorker):
		seed = "request\x00" + e.SessionID
	case e.SessionID != "" && (e.Type == audit.TypeSessionStart || e.Type == audit.TypeSessionEnd):
		seed = "session\x00" + e.SessionID
	default:
		seed = fmt.Sprintf("event\x00%s\x00%d\x00%d\x00%s", e.Type, e.ID, e.Time.UnixNano(), e.SessionID)
	}
	h := sha256.Sum256([]byte("limen audit id\x00" + seed))
	h[6] = h[6]&0x0f | 0x50 // a name-based UUID (version 5 layout)
	h[8] = h[8]&0x3f | 0x80
	return types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16]))
}

// sourceIP is the address part of a client address "HOST:PORT".
func sourceIP(addr string) string {
	if addr == "" {
		return ""
	}
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}
