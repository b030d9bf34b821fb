package policy

import (
	"context"
	"fmt"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/limenhq/limen/gateway/bots"
	"github.com/limenhq/limen/gateway/identity"
)

// BotOIDCAllow reports whether a CI workload's verified ID token, from
// issuer (a CI system of kind) with claims, may log in as bot
// (data.limen.bots.oidc_login). A bundle without that rule lets no token
// in.
func (e *Engine) BotOIDCAllow(ctx context.Context, bot identity.Principal, issuer string, kind bots.CIKind, claims map[string]any) (bool, error) {
	s, err := e.snapshot()
	if err != nil {
		return false, err
	}
	if err := bot.Validate(); err != nil || bot.Kind != identity.KindBot {
		return false, fmt.Errorf("%w: bot %s: %v", ErrInvalidInput, bot.String(), err)
	}
	if s.botOIDC == nil {
		return false, nil
	}
	c, err := ast.InterfaceToValue(claims)
	if err != nil {
		return false, fmt.Errorf("%w: token claims: %v", ErrInvalidInput, err)
	}
	input := ast.NewObject(
		ast.Item(ast.InternedTerm("bot"), principalTerm(bot)),
		ast.Item(ast.InternedTerm("issuer"), ast.StringTerm(issuer)),
		ast.Item(ast.InternedTerm("issuer_kind"), ast.StringTerm(string(kind))),
		ast.Item(ast.InternedTerm("claims"), ast.NewTerm(c)),
	)
	rs, err := s.botOIDC.Eval(ctx, rego.EvalParsedInput(input))
	if err != nil {
		return false, fmt.Errorf("%w: evaluate %s: %v", ErrUnavailable, queryBotOIDC, err)
	}
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return false, nil
	}
	allow, ok := rs[0].Expressions[0].Value.(bool)
	if !ok {
		return false, fmt.Errorf("%w: %s is %T, want a boolean", ErrUnavailable, queryBotOIDC, rs[0].Expressions[0].Value)
	}
	return allow, nil
}
