package proxy

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/limenhq/limen/gateway/authapi"
	"github.com/limenhq/limen/gateway/bots"
	"github.com/limenhq/limen/gateway/oidc"
)

// CIIssuer is a CI system whose workload ID tokens may log bots in: tokens
// from Issuer whose client (azp, or only audience) is Audience. Policy
// knows it by Name, and by Kind which claims pin its tokens to an owner.
type CIIssuer struct {
	Name     string
	Kind     bots.CIKind
	Issuer   string
	Audience string
}

// openIdentity opens the bot directory and, when configured, discovers the
// OIDC provider and the CI issuers. Discovery happens at start so that a
// wrong issuer URL is an error now, not at the first login.
func (s *Server) openIdentity(ctx context.Context, c Config) error {
	bdb, err := s.store.Bots(ctx)
	if err != nil {
		return err
	}
	s.Bots = bots.New(bdb, c.Now)
	hc := &http.Client{Timeout: 30 * time.Second}
	if c.OIDC != nil {
		pc := *c.OIDC
		if pc.HTTPClient == nil {
			pc.HTTPClient = hc
		}
		if s.OIDC, err = oidc.NewProvider(ctx, pc); err != nil {
			return fmt.Errorf("oidc-issuer: %w", err)
		}
	}
	for _, ci := range c.CIIssuers {
		v, err := oidc.Discover(ctx, ci.Issuer, ci.Audience, hc)
		if err != nil {
			return fmt.Errorf("ci-issuer %s: %w", ci.Issuer, err)
		}
		if _, err := bots.ParseCIKind(string(ci.Kind)); err != nil {
			return fmt.Errorf("ci-issuer-kind %s: %w", ci.Name, err)
		}
		s.ci = append(s.ci, authapi.CIIssuer{Name: ci.Name, Kind: ci.Kind, Verifier: v})
	}
	return nil
}
