package audit

import (
	"database/sql"

	"context"
	"github.com/limenhq/limen/gateway/store/sqlite"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/limenhq/limen/gateway/identity"
)

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func kubeEvent(user, cluster, verb string, at time.Time) Event {
	return Event{
		Type:       TypeKubeRequest,
		Time:       at,
		Principal:  identity.Principal{Kind: identity.KindUser, Name: user},
		Groups:     []string{"limen:view"},
		Cluster:    cluster,
		SessionID:  "0123456789abcdef0123456789abcdef",
		ClientAddr: "192.0.2.1:5555",
		Kube: &KubeRequest{
			Verb: verb, APIVersion: "v1", Resource: "pods", Namespace: "default", Name: "web",
			Method: "GET", Path: "/api/v1/namespaces/default/pods/web", Status: 200, Latency: 3 * time.Millisecond,
		},
	}
}

func openTemp(t testing.TB, opts Options) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), FileName)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	}
	s, err := Open(context.Background(), path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

// sqlDB is the SQLite handle under s, for the tests that play an operator
// beside the store.
func sqlDB(s *Store) *sql.DB { return s.db.(*sqlite.Audit).DB() }
