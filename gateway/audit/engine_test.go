package audit

import (
	"testing"

	"github.com/limenhq/limen/gateway/store"
)

// TestEngineKnowsTheTypes: the engines' outcome queries name three event
// types; they must be these.
func TestEngineKnowsTheTypes(t *testing.T) {
	for _, c := range []struct {
		engine string
		typ    Type
	}{{store.AuditKubeSent, TypeKubeSent}, {store.AuditKubeRequest, TypeKubeRequest}, {store.AuditAuthDenied, TypeAuthDenied}} {
		if c.engine != string(c.typ) {
			t.Errorf("store says %q, audit says %q", c.engine, c.typ)
		}
	}
}
