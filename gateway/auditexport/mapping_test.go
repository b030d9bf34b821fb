package auditexport

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
)

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

const sid = "0123456789abcdef0123456789abcdef"

var alice = identity.Principal{Kind: identity.KindUser, Name: "alice", ClientID: "kubectl", LoginID: "login-1",
	Traits: map[string][]string{"groups": {"admins", "dev"}}}

func kubeRequest() audit.Event {
	return audit.Event{ID: 7, Type: audit.TypeKubeRequest, Time: t0, Principal: alice, Groups: []string{"limen:view"},
		KubeUser: "limen:alice", Cluster: "prod", SessionID: sid, ClientAddr: "192.0.2.1:5555",
		Kube: &audit.KubeRequest{Verb: "get", APIVersion: "v1", Resource: "pods", Namespace: "default", Name: "web",
			Method: "GET", Path: "/api/v1/namespaces/default/pods/web", Status: 200, Latency: 3 * time.Millisecond,
			UserAgent: "kubectl/v1.35.0 (linux/amd64)"}}
}

// roundTrip encodes the mapped event as the file sink does and decodes it
// strictly with the API server's types, as a receiver would.
func roundTrip(t *testing.T, e audit.Event) *auditv1.Event {
	t.Helper()
	b, err := json.Marshal(Map(e))
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeEvent(b)
	if err != nil {
		t.Fatalf("strict decode of %s: %v", b, err)
	}
	return got
}

func TestMap(t *testing.T) {
	exit := 3
	tests := []struct {
		name  string
		e     audit.Event
		check func(t *testing.T, got *auditv1.Event)
	}{
		{"kube.request", kubeRequest(), func(t *testing.T, got *auditv1.Event) {
			want(t, "stage", string(got.Stage), string(auditv1.StageResponseComplete))
			want(t, "level", string(got.Level), string(auditv1.LevelMetadata))
			want(t, "verb", got.Verb, "get")
			want(t, "user", got.User.Username, "alice")
			want(t, "user trait", strings.Join(got.User.Extra["limen.dev/trait-groups"], ","), "admins,dev")
			want(t, "impersonated user", got.ImpersonatedUser.Username, "limen:alice")
			want(t, "impersonated groups", strings.Join(got.ImpersonatedUser.Groups, ","), "limen:view")
			want(t, "requestURI", got.RequestURI, "/api/v1/namespaces/default/pods/web")
			want(t, "sourceIPs", strings.Join(got.SourceIPs, ","), "192.0.2.1")
			want(t, "userAgent", got.UserAgent, "kubectl/v1.35.0 (linux/amd64)")
			want(t, "objectRef", got.ObjectRef.Resource+"/"+got.ObjectRef.Namespace+"/"+got.ObjectRef.Name+"/"+got.ObjectRef.APIVersion,
				"pods/default/web/v1")
			if got.ResponseStatus == nil || got.ResponseStatus.Code != 200 {
				t.Errorf("responseStatus %+v, want code 200", got.ResponseStatus)
			}
			want(t, "stageTimestamp", got.StageTimestamp.UTC().String(), t0.String())
			want(t, "requestReceivedTimestamp", got.RequestReceivedTimestamp.UTC().String(), t0.Add(-3*time.Millisecond).String())
			for k, v := range map[string]string{AnnotationCluster: "prod", AnnotationSession: sid, AnnotationClient: "kubectl",
				AnnotationLogin: "login-1", AnnotationType: "kube.request", AnnotationSeq: "7", AnnotationPrincipal: "user:alice"} {
				want(t, k, got.Annotations[k], v)
			}
			if got.AuditID == "" || got.AuditID != Map(sent()).AuditID {
				t.Errorf("auditID %q, want the one of the request's kube.sent %q", got.AuditID, Map(sent()).AuditID)
			}
		}},
		{"kube.sent", sent(), func(t *testing.T, got *auditv1.Event) {
			want(t, "stage", string(got.Stage), string(auditv1.StageRequestReceived))
			if got.ResponseStatus != nil {
				t.Errorf("responseStatus %+v on RequestReceived", got.ResponseStatus)
			}
			want(t, "grant", got.Annotations[AnnotationGrant], "limen:edit,limen:view")
		}},
		{"unclassified request", func() audit.Event {
			e := kubeRequest()
			e.Kube = &audit.KubeRequest{Method: "POST", Path: "/apis", Status: 400}
			return e
		}(), func(t *testing.T, got *auditv1.Event) {
			want(t, "verb", got.Verb, "post")
			if got.ObjectRef != nil {
				t.Errorf("objectRef %+v for an unclassified request", got.ObjectRef)
			}
		}},
		{"bot", func() audit.Event {
			e := kubeRequest()
			e.Principal = identity.Principal{Kind: identity.KindBot, Name: "ci", ClientID: "kubectl"}
			return e
		}(), func(t *testing.T, got *auditv1.Event) {
			want(t, "user", got.User.Username, "bot:ci")
			want(t, "principal", got.Annotations[AnnotationPrincipal], "bot:ci")
		}},
		{"session.start", audit.Event{ID: 8, Type: audit.TypeSessionStart, Time: t0, Principal: alice, Groups: []string{"limen:edit"},
			Cluster: "prod", SessionID: sid, Session: &audit.Session{Kind: "kube", Login: "exec", Namespace: "default", Pod: "web",
				Container: "app", Command: []string{"sh", "-c", "id"}}}, func(t *testing.T, got *auditv1.Event) {
			want(t, "stage", string(got.Stage), string(auditv1.StageResponseStarted))
			want(t, "verb", got.Verb, "exec")
			want(t, "objectRef", got.ObjectRef.Resource+"/"+got.ObjectRef.Name+"/"+got.ObjectRef.Subresource, "pods/web/exec")
			want(t, "command", got.Annotations["limen.dev/command"], "sh -c id")
			if got.AuditID == Map(kubeRequest()).AuditID {
				t.Error("a session shares its auditID with the request that opened it")
			}
		}},
		{"session.end", audit.Event{ID: 9, Type: audit.TypeSessionEnd, Time: t0, Principal: alice, Cluster: "prod", SessionID: sid,
			Session: &audit.Session{Kind: "kube", Login: "exec", Pod: "web", ExitCode: &exit, BytesOut: 12, Duration: 2 * time.Second,
				RecordingSHA256: "ab", EndReason: audit.EndCompleted}}, func(t *testing.T, got *auditv1.Event) {
			want(t, "stage", string(got.Stage), string(auditv1.StageResponseComplete))
			want(t, "exit", got.Annotations["limen.dev/exit-code"], "3")
			want(t, "bytes", got.Annotations["limen.dev/bytes-out"], "12")
			want(t, "reason", got.Annotations["limen.dev/end-reason"], "completed")
			want(t, "received", got.RequestReceivedTimestamp.UTC().String(), t0.Add(-2*time.Second).String())
			want(t, "same auditID as its start", string(got.AuditID), string(Map(audit.Event{Type: audit.TypeSessionStart, SessionID: sid}).AuditID))
		}},
		{"auth.denied unauthenticated", audit.Event{ID: 10, Type: audit.TypeAuthDenied, Time: t0, ClientAddr: "[2001:db8::1]:443",
			Denied: &audit.Denied{Hop: audit.HopProxy, Action: audit.ActionKube, Reason: "no client certificate", Path: "/k8s/prod/api?x=1", Count: 5}},
			func(t *testing.T, got *auditv1.Event) {
				want(t, "user", got.User.Username, "system:anonymous")
				want(t, "sourceIPs", strings.Join(got.SourceIPs, ","), "2001:db8::1")
				want(t, "decision", got.Annotations["authorization.k8s.io/decision"], "forbid")
				want(t, "reason", got.Annotations["authorization.k8s.io/reason"], "no client certificate")
				want(t, "count", got.Annotations["limen.dev/count"], "5")
				want(t, "requestURI without query", got.RequestURI, "/k8s/prod/api")
				if got.ResponseStatus == nil || got.ResponseStatus.Code != 403 {
					t.Errorf("responseStatus %+v, want 403", got.ResponseStatus)
				}
			}},
		{"admin event", audit.Event{ID: 11, Type: audit.TypeUserLock, Time: t0, Principal: alice,
			Fields: map[string]string{"user": "bob", "Reason Text": "left", "event": "spoof"}}, func(t *testing.T, got *auditv1.Event) {
			want(t, "verb", got.Verb, "lock")
			want(t, "objectRef", got.ObjectRef.APIGroup+"/"+got.ObjectRef.Resource+"/"+got.ObjectRef.Name, "limen.dev/user/bob")
			want(t, "field", got.Annotations["limen.dev/reason-text"], "left")
			want(t, "a field cannot overwrite Limen's own annotation", got.Annotations[AnnotationType], "user.lock")
		}},
		{"retention run", audit.Event{ID: 12, Type: audit.TypeAuditRetention, Time: t0, Fields: map[string]string{"deleted": "40"}},
			func(t *testing.T, got *auditv1.Event) {
				want(t, "verb", got.Verb, "retention")
				want(t, "deleted", got.Annotations["limen.dev/deleted"], "40")
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := roundTrip(t, tt.e)
			want(t, "apiVersion", got.APIVersion, "audit.k8s.io/v1")
			want(t, "kind", got.Kind, "Event")
			if got.AuditID == "" {
				t.Error("no auditID")
			}
			if got.AuditID != Map(tt.e).AuditID {
				t.Error("auditID changes between two mappings of one event: a redelivery would not be recognised")
			}
			tt.check(t, got)
		})
	}
}

func sent() audit.Event {
	e := kubeRequest()
	e.ID, e.Type, e.Groups, e.KubeUser = 6, audit.TypeKubeSent, []string{"limen:edit", "limen:view"}, ""
	k := *e.Kube
	k.Status, k.Latency, k.UserAgent = 0, 0, ""
	e.Kube = &k
	return e
}

func TestAuditIDsDiffer(t *testing.T) {
	a := Map(audit.Event{ID: 1, Type: audit.TypeUserAdd, Time: t0})
	b := Map(audit.Event{ID: 2, Type: audit.TypeUserAdd, Time: t0})
	if a.AuditID == b.AuditID {
		t.Fatalf("two admin events share auditID %s", a.AuditID)
	}
}

func TestDecodeStrictRefuses(t *testing.T) {
	good, _ := json.Marshal(Map(kubeRequest()))
	for name, b := range map[string]string{
		"unknown field":  strings.Replace(string(good), `"level":`, `"surprise":1,"level":`, 1),
		"duplicate":      strings.Replace(string(good), `"level":"Metadata"`, `"level":"Metadata","level":"None"`, 1),
		"wrong kind":     strings.Replace(string(good), `"kind":"Event"`, `"kind":"Policy"`, 1),
		"wrong version":  strings.Replace(string(good), `"audit.k8s.io/v1"`, `"audit.k8s.io/v9"`, 1),
		"not json":       "{",
		"list as an one": `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[]}`,
	} {
		if _, err := DecodeEvent([]byte(b)); err == nil {
			t.Errorf("%s: decoded %s", name, b)
		}
	}
	if _, err := DecodeEvent(good); err != nil {
		t.Fatal(err)
	}
}

func want(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %q, want %q", what, got, want)
	}
}
