package audit

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/identity"
)

func TestValidate(t *testing.T) {
	exit := 0
	good := []Event{
		kubeEvent("alice", "prod", "get", t0),
		{Type: TypeAuthDenied, Time: t0, Cluster: "prod", Denied: &Denied{Hop: HopProxy, Action: ActionKube, Reason: "no groups", Path: "/api"}},
		{Type: TypeAuthDenied, Time: t0, Denied: &Denied{Hop: HopProxy, Action: ActionLogin, Reason: "bad credentials", Count: 40}},
		{Type: TypeSessionStart, Time: t0, Principal: identity.Principal{Kind: identity.KindBot, Name: "ci"},
			Session: &Session{Kind: "kube", Login: "exec", Namespace: "a", Pod: "p", Command: []string{"sh"}}},
		{Type: TypeSessionEnd, Time: t0, Session: &Session{Kind: "kube", Login: "portforward", Ports: []string{"8080"},
			ExitCode: &exit, BytesIn: 10, BytesOut: 20, Duration: time.Second, RecordingSHA256: strings.Repeat("a", 64),
			EndReason: EndCompleted}},
		{Type: TypeSessionEnd, Time: t0, Session: &Session{Kind: "kube", Login: "exec", EndReason: EndTruncated}},
		{Type: TypeSessionEnd, Time: t0, Session: &Session{Kind: "kube", Login: "watch", Target: "default/pods",
			EndReason: EndLocked, EndDetail: "user alice is locked", EndHop: HopProxy}},
		{Type: TypeTokenCreate, Time: t0, Principal: identity.Principal{Kind: identity.KindUser, Name: "admin"},
			Fields: map[string]string{"token": "join", "cluster": "prod"}},
		{Type: "user.add", Time: t0, Fields: map[string]string{"user": "bob"}},
	}
	for _, e := range good {
		if err := e.Validate(); err != nil {
			t.Errorf("Validate(%s) = %v", e.Type, err)
		}
	}
	mut := func(f func(*Event)) Event { e := kubeEvent("alice", "prod", "get", t0); f(&e); return e }
	bad := map[string]Event{
		"no type":             mut(func(e *Event) { e.Type = "" }),
		"upper-case type":     mut(func(e *Event) { e.Type = "Kube.Request" }),
		"type without dot":    mut(func(e *Event) { e.Type = "kube" }),
		"no time":             mut(func(e *Event) { e.Time = time.Time{} }),
		"kube body missing":   mut(func(e *Event) { e.Kube = nil }),
		"query in path":       mut(func(e *Event) { e.Kube.Path = "/api?token=secret" }),
		"no method":           mut(func(e *Event) { e.Kube.Method = "" }),
		"bad status":          mut(func(e *Event) { e.Kube.Status = -1 }),
		"two bodies":          mut(func(e *Event) { e.Denied = &Denied{Hop: HopProxy, Action: ActionKube, Reason: "x"} }),
		"bad principal":       mut(func(e *Event) { e.Principal.Name = "system:admin" }),
		"denied bad hop":      {Type: TypeAuthDenied, Time: t0, Denied: &Denied{Hop: "client", Action: ActionKube, Reason: "x"}},
		"denied no action":    {Type: TypeAuthDenied, Time: t0, Denied: &Denied{Hop: HopProxy, Reason: "x"}},
		"denied bad action":   {Type: TypeAuthDenied, Time: t0, Denied: &Denied{Hop: HopProxy, Action: "Admin", Reason: "x"}},
		"denied count < 0":    {Type: TypeAuthDenied, Time: t0, Denied: &Denied{Hop: HopProxy, Action: ActionAdmin, Reason: "x", Count: -1}},
		"denied no reason":    {Type: TypeAuthDenied, Time: t0, Denied: &Denied{Hop: HopWorker, Action: ActionKube}},
		"denied no body":      {Type: TypeAuthDenied, Time: t0},
		"session no login":    {Type: TypeSessionStart, Time: t0, Session: &Session{Kind: "kube"}},
		"unknown end reason":  {Type: TypeSessionEnd, Time: t0, Session: &Session{Kind: "kube", Login: "exec", EndReason: "fine"}},
		"end reason at start": {Type: TypeSessionStart, Time: t0, Session: &Session{Kind: "kube", Login: "exec", EndReason: EndCompleted}},
		"unknown end hop":     {Type: TypeSessionEnd, Time: t0, Session: &Session{Kind: "kube", Login: "exec", EndReason: EndLocked, EndHop: "client"}},
		"end hop at start":    {Type: TypeSessionStart, Time: t0, Session: &Session{Kind: "kube", Login: "exec", EndHop: HopProxy}},
	}
	for name, e := range bad {
		if err := e.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Validate = %v, want ErrInvalid", name, err)
		}
	}
}
