package audit

import (
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/identity"
)

// workerEvent is a kube.request as the worker sends it for a GET: a user
// with traits and a client, two groups, the classification.
func workerEvent() Event {
	return Event{
		Type: TypeKubeRequest, Time: time.Date(2026, 12, 2, 19, 20, 12, 123456789, time.UTC),
		Principal: identity.Principal{Kind: identity.KindUser, Name: "alice", Traits: map[string][]string{"groups": {"dev", "ops"}},
			ClientID: identity.ClientKubectl, LoginID: "5f1d0c2b9e8a7f6d"},
		Groups: []string{"limen:edit", "limen:view"}, KubeUser: "alice", Cluster: "demo",
		SessionID: "0123456789abcdef0123456789abcdef", ClientAddr: "127.0.0.1:51234",
		Kube: &KubeRequest{Verb: "get", APIVersion: "v1", Resource: "configmaps", Namespace: "bench-get", Name: "one",
			Method: "GET", Path: "/api/v1/namespaces/bench-get/configmaps/one", Status: 200, Latency: 1234567 * time.Nanosecond,
			UserAgent: "limen-bench/v0.0.0 (linux/amd64) kubernetes/$Format"},
	}
}

func BenchmarkEncodeEvent(b *testing.B) {
	e := workerEvent()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeEvent(e); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeEvent(b *testing.B) {
	data, err := EncodeEvent(workerEvent())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeEvent(data); err != nil {
			b.Fatal(err)
		}
	}
}
