package proxy_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/sessions"
)

// keepGroups stands in for a worker whose own policy snapshot allows fewer
// groups than the grant carries (the real engine's AllowGroups is tested in
// gateway/policy): it keeps only the listed ones.
type keepGroups []string

func (k keepGroups) AllowGroups(_ context.Context, _ identity.Principal, _ policy.Cluster, groups []string) ([]string, string, error) {
	var out []string
	for _, g := range groups {
		if slices.Contains(k, g) {
			out = append(out, g)
		}
	}
	return out, "narrowed-on-worker", nil
}

// story is what the audit says of one session: sent holds the proxy's
// record of the request (kube.sent), requests its outcome.
type story struct {
	starts, ends, requests, sent []audit.Event
}

// storyOf waits until the store holds a session.end for id and returns every
// event of the session, the proxy's records of its requests included.
func storyOf(t *testing.T, st *audit.Store, id string) story {
	t.Helper()
	for end := time.Now().Add(deadline); ; time.Sleep(10 * time.Millisecond) {
		evs, err := st.Search(context.Background(), audit.Query{})
		if err != nil {
			t.Fatal(err)
		}
		sent, err := st.Search(context.Background(), audit.Query{Type: audit.TypeKubeSent})
		if err != nil {
			t.Fatal(err)
		}
		var s story
		for _, ev := range sent {
			if ev.SessionID == id {
				s.sent = append(s.sent, ev)
			}
		}
		for _, ev := range evs {
			if ev.SessionID != id {
				continue
			}
			switch ev.Type {
			case audit.TypeSessionStart:
				s.starts = append(s.starts, ev)
			case audit.TypeSessionEnd:
				s.ends = append(s.ends, ev)
			case audit.TypeKubeRequest:
				s.requests = append(s.requests, ev)
			}
		}
		// Told to its end: the session's end, and the request's outcome.
		if len(s.ends) > 0 && len(s.sent) > 0 && !slices.ContainsFunc(s.sent, func(ev audit.Event) bool { return ev.OutcomeUnknown }) {
			return s
		}
		if time.Now().After(end) {
			t.Fatalf("no session.end, or no request with its outcome, for %s within %s: %+v", id, deadline, s)
		}
	}
}

// TestOneSessionOneStory ends a stream of each kind that is not an upgrade
// in each way it can end, with a worker whose policy drops one of the
// granted groups, and reads what the audit says: one session.start and one
// session.end, the narrowed groups in every event, and in the end both what
// the worker saw (bytes, the relay's reason) and why the proxy ended it, when
// it did.
func TestOneSessionOneStory(t *testing.T) {
	const base = "/k8s/demo/api/v1/namespaces/default"
	kinds := []struct {
		name, target string
		kind         sessions.Kind
		sessTarget   string
		pod          string
	}{
		{"watch", base + "/configmaps?watch=1", sessions.KindWatch, "default/configmaps", ""},
		{"logs", base + "/pods/p/log?follow=true&container=app", sessions.KindLogs, "default/p/app", "p"},
		{"proxy", base + "/services/web:http/proxy/events", sessions.KindProxy, "services/default/web:http", ""},
	}
	ends := []struct {
		name   string
		end    func(p *path, id string, hangUp func())
		reason string
		hop    string
		detail string
	}{
		{"locked at the proxy", func(p *path, _ string, _ func()) { p.proxy.lock() }, audit.EndLocked, audit.HopProxy, "incident 42"},
		{"locked at the worker", func(p *path, _ string, _ func()) { p.worker.lock() }, audit.EndLocked, audit.HopWorker, "incident 42"},
		{"killed at the proxy", func(p *path, id string, _ func()) { p.proxy.reg.Kill(id) }, audit.EndKilled, audit.HopProxy, ""},
		{"killed at the worker", func(p *path, id string, _ func()) { p.worker.reg.Kill(id) }, audit.EndKilled, audit.HopWorker, ""},
		{"the client hangs up", func(_ *path, _ string, hangUp func()) { hangUp() }, audit.EndClientClosed, audit.HopWorker, ""},
	}
	for _, k := range kinds {
		for _, e := range ends {
			t.Run(k.name+" "+e.name, func(t *testing.T) {
				p, gone := newPath(t)
				p.handler.Policy = keepGroups{"limen:edit"}
				resp, ended := p.openResp(t, k.target)
				live := p.proxy.reg.List()
				if len(live) != 1 || live[0].Kind != k.kind {
					t.Fatalf("the proxy lists %+v, want one %s", live, k.kind)
				}
				id := live[0].ID
				e.end(p, id, func() { resp.Body.Close() })
				if e.name != "the client hangs up" {
					waitFor(t, ended, "the response ends")
				}
				waitFor(t, gone, "the API server's side closes")

				s := storyOf(t, p.store, id)
				if len(s.starts) != 1 || len(s.ends) != 1 || len(s.requests) != 1 || len(s.sent) != 1 {
					t.Fatalf("session %s has %d session.start, %d session.end, %d kube.request, %d kube.sent; want one of each",
						id, len(s.starts), len(s.ends), len(s.requests), len(s.sent))
				}
				// The proxy's record names the groups it granted; the
				// worker impersonated fewer.
				if sent, req := s.sent[0], s.requests[0]; sent.OutcomeUnknown || sent.Principal.Name != "alice" || sent.Cluster != "demo" ||
					!slices.Contains(sent.Groups, "limen:edit") || sent.Kube.Verb != req.Kube.Verb || sent.Kube.Path != req.Kube.Path {
					t.Errorf("kube.sent %+v %+v, want alice's record of the request %+v on demo, its outcome stored", sent, sent.Kube, req.Kube)
				}
				for _, ev := range []audit.Event{s.starts[0], s.ends[0], s.requests[0]} {
					if !slices.Equal(ev.Groups, []string{"limen:edit"}) || ev.Principal.Name != "alice" || ev.Cluster != "demo" {
						t.Errorf("%s: %s on %s with groups %v, want alice on demo with the groups impersonated [limen:edit]",
							ev.Type, ev.Principal, ev.Cluster, ev.Groups)
					}
				}
				start, end := s.starts[0].Session, s.ends[0].Session
				if start.Kind != sessions.AuditKind || start.Login != string(k.kind) || start.Target != k.sessTarget ||
					start.Namespace != "default" || start.Pod != k.pod || start.EndReason != "" {
					t.Errorf("session.start %+v, want kube %s on %s", start, k.kind, k.sessTarget)
				}
				if end.Login != string(k.kind) || end.Target != k.sessTarget {
					t.Errorf("session.end %+v is not the session that started", end)
				}
				if end.EndReason != e.reason || end.EndHop != e.hop || !strings.Contains(end.EndDetail, e.detail) {
					t.Errorf("session.end says %q by the %s (%q), want %q by the %s (with %q)",
						end.EndReason, end.EndHop, end.EndDetail, e.reason, e.hop, e.detail)
				}
				// The worker's facts: what it relayed, for how long.
				if end.BytesOut < int64(len("first\n")) || end.Duration <= 0 {
					t.Errorf("session.end %+v: want the bytes relayed and a duration", end)
				}
				if k := s.requests[0].Kube; k.Status != http.StatusOK {
					t.Errorf("kube.request status %d, want the API server's 200", k.Status)
				}
			})
		}
	}
}
