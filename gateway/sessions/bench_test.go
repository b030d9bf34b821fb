package sessions

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/kpath"
	"github.com/limenhq/limen/gateway/locks"
	"github.com/limenhq/limen/gateway/reqinfo"
)

// BenchmarkPerRequest is what each hop now spends on every request before
// forwarding it: classify (reqinfo.Classify, then Classify) and Track, then End.
func BenchmarkPerRequest(b *testing.B) {
	for _, bc := range []struct{ name, target string }{
		{"get", "/api/v1/namespaces/default/configmaps/c"},
		{"list", "/api/v1/namespaces/default/configmaps?limit=500"},
		{"watch", "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=5&allowWatchBookmarks=true"},
		{"log-follow", "/api/v1/namespaces/default/pods/p/log?follow=true&container=c"},
	} {
		path, query, _ := strings.Cut(bc.target, "?")
		r := httptest.NewRequest(http.MethodGet, "https://worker/", nil)
		r.URL.RawQuery = query
		p, err := kpath.Parse(path)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("classify/"+bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				info, err := reqinfo.Classify(r, p)
				if err != nil {
					b.Fatal(err)
				}
				_ = Classify(r, info)
			}
		})
	}
	set := locks.NewSet()
	reg := New(Config{Locks: set})
	defer reg.Close()
	s := Session{ID: "b", Principal: user("alice"), Cluster: "dev", Expires: time.Now().Add(time.Hour)}
	b.Run("track-guard", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l, err := reg.Track(context.Background(), s)
			if err != nil {
				b.Fatal(err)
			}
			l.End(ReasonCompleted)
		}
	})
}

// BenchmarkGet is the proxy's lookup of a session for each session event a
// worker sends, with 1000 watches live (the bench's idle watches ending).
func BenchmarkGet(b *testing.B) {
	reg := New(Config{Locks: locks.NewSet()})
	defer reg.Close()
	for i := range 1000 {
		s := Session{ID: fmt.Sprintf("w%04d", i), Principal: user("alice"), Cluster: "dev", Kind: KindWatch, Expires: time.Now().Add(time.Hour)}
		if _, err := reg.Register(context.Background(), s); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := reg.Get("w0500"); !ok {
			b.Fatal("not found")
		}
	}
}
