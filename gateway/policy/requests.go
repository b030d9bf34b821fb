package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/limenhq/limen/gateway/identity"
)

// The access-request decisions (policies/requests.rego); both optional: a
// bundle without them makes nothing requestable and lets nobody approve.
const (
	queryRequestable = "data.limen.requests.requestable"
	queryMayApprove  = "data.limen.requests.may_approve"
)

// RequestTerms are the terms on which a principal may request a role on a
// cluster: the longest duration, whether a reason is required, how many
// approvers must approve, and the duration up to which a request needs
// none (0: every request needs its approvals).
type RequestTerms struct {
	MaxDuration     time.Duration `json:"maxDuration"`
	AutoApproveUpTo time.Duration `json:"autoApproveUpTo"`
	ReasonRequired  bool          `json:"reasonRequired"`
	Approvals       int           `json:"approvals"`
}

// Requestable returns the roles p may request on c, with their terms.
func (e *Engine) Requestable(ctx context.Context, p identity.Principal, c Cluster) (map[string]RequestTerms, error) {
	s, err := e.snapshot()
	if err != nil {
		return nil, err
	}
	if err := checkInput(p, c); err != nil {
		return nil, err
	}
	if s.requestable == nil {
		return map[string]RequestTerms{}, nil
	}
	rs, err := s.requestable.Eval(ctx, rego.EvalParsedInput(groupsInput(p.WithoutRequests(), c, nil)))
	if err != nil {
		return nil, fmt.Errorf("%w: evaluate %s: %v", ErrUnavailable, queryRequestable, err)
	}
	out := map[string]RequestTerms{}
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return out, nil
	}
	// The result is small (a few roles): a JSON round trip reads it.
	raw, err := json.Marshal(rs[0].Expressions[0].Value)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnavailable, queryRequestable, err)
	}
	var terms map[string]struct {
		MaxDuration     int64 `json:"maxDuration"`
		AutoApproveUpTo int64 `json:"autoApproveUpTo"`
		ReasonRequired  bool  `json:"reasonRequired"`
		Approvals       int   `json:"approvals"`
	}
	if err := json.Unmarshal(raw, &terms); err != nil {
		return nil, fmt.Errorf("%w: %s is not an object of request terms: %v", ErrUnavailable, queryRequestable, err)
	}
	for role, t := range terms {
		if t.MaxDuration <= 0 || t.Approvals < 1 {
			// Validation refuses such data; a custom policy that
			// produces it offers nothing rather than unbounded access.
			e.log.Warn("policy offered a request without a duration or approvals; ignored", "role", role, "revision", s.revision)
			continue
		}
		out[role] = RequestTerms{MaxDuration: time.Duration(t.MaxDuration), AutoApproveUpTo: time.Duration(t.AutoApproveUpTo),
			ReasonRequired: t.ReasonRequired, Approvals: t.Approvals}
	}
	return out, nil
}

// MayApprove reports whether approver may approve requester's request for
// role on c. The requester never may, whatever the policy says.
func (e *Engine) MayApprove(ctx context.Context, approver, requester identity.Principal, role string, c Cluster) (bool, error) {
	if approver.Same(requester) {
		return false, nil
	}
	s, err := e.snapshot()
	if err != nil {
		return false, err
	}
	if err := checkInput(approver, c); err != nil {
		return false, err
	}
	if s.mayApprove == nil {
		return false, nil
	}
	request := ast.NewObject(
		ast.Item(ast.InternedTerm("role"), ast.StringTerm(role)),
		ast.Item(ast.InternedTerm("cluster"), clusterTerm(c)),
		ast.Item(ast.InternedTerm("requester"), principalTerm(requester)),
	)
	input := ast.NewObject(
		ast.Item(ast.InternedTerm("client"), ast.StringTerm(approver.ClientID)),
		ast.Item(ast.InternedTerm("principal"), principalTerm(approver)),
		ast.Item(ast.InternedTerm("request"), ast.NewTerm(request)),
	)
	rs, err := s.mayApprove.Eval(ctx, rego.EvalParsedInput(input))
	if err != nil {
		return false, fmt.Errorf("%w: evaluate %s: %v", ErrUnavailable, queryMayApprove, err)
	}
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return false, nil
	}
	ok, isBool := rs[0].Expressions[0].Value.(bool)
	if !isBool {
		return false, fmt.Errorf("%w: %s is %T, want a boolean", ErrUnavailable, queryMayApprove, rs[0].Expressions[0].Value)
	}
	return ok, nil
}
