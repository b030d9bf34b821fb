package policy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"

	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/scope"
)

// The decisions Limen asks. All but grants (explanations) are required: the
// hot path trusts data validation (errors) to have refused malformed data.
const (
	queryGroups   = "data.limen.kube.groups"
	queryGrants   = "data.limen.kube.grants"
	queryClusters = "data.limen.kube.clusters"
	queryAdmin    = "data.limen.admin.allow"
	queryErrors   = "data.limen.validate.errors"
	// queryBotOIDC is optional: without it no CI token logs a bot in.
	queryBotOIDC = "data.limen.bots.oidc_login"
)

// snapshot is one activated bundle: its queries prepared once, its data in
// a private store, and the decision cache that belongs to this revision
// alone. A snapshot is immutable once built, so decisions need no lock.
type snapshot struct {
	revision  string
	mark      *mark // nil for the embedded default
	activated time.Time
	groups    rego.PreparedEvalQuery
	grants    *rego.PreparedEvalQuery
	clusters  rego.PreparedEvalQuery
	admin     rego.PreparedEvalQuery
	botOIDC   *rego.PreparedEvalQuery
	// requestable and mayApprove are the access-request decisions, nil
	// when the bundle has none (requests.go).
	requestable *rego.PreparedEvalQuery
	mayApprove  *rego.PreparedEvalQuery
	cache       *decisionCache
	// scopes are the registered clients and their compiled scope lists
	// (data.limen.config.clients), matched per request without Rego.
	scopes *scope.Set
	// fast answers groups on a cache miss without Rego (fastpath.go); nil,
	// with fastOff saying why, for a bundle it cannot answer for.
	fast    *fastPath
	fastOff string
}

// content is a bundle's policy and data, before compilation.
type content struct {
	revision string
	modules  map[string]*ast.Module
	data     map[string]any
	// mark orders bundles read from a bundle service or file; nil for the
	// embedded default, which is never compared with another.
	mark *mark
}

// compile builds a snapshot from c and runs every activation check: the
// modules compile, the required decisions exist, data validation reports
// no error, and no probed decision grants a group outside valid_group.
func compile(ctx context.Context, c content, cacheEntries int) (*snapshot, error) {
	compiler := ast.NewCompiler().WithStrict(false)
	compiler.Compile(c.modules)
	if compiler.Failed() {
		return nil, fmt.Errorf("%w: policy does not compile: %v", ErrBundleRefused, compiler.Errors)
	}
	for _, q := range []string{queryGroups, queryClusters, queryAdmin, queryErrors} {
		if len(compiler.GetRulesExact(ast.MustParseRef(q))) == 0 {
			return nil, fmt.Errorf("%w: policy defines no %s: every Limen bundle must", ErrBundleRefused, q)
		}
	}
	if c.data == nil {
		c.data = map[string]any{}
	}
	store := inmem.NewFromObjectWithOpts(c.data, inmem.OptRoundTripOnWrite(false), inmem.OptReturnASTValuesOnRead(true))
	prepare := func(q string) (rego.PreparedEvalQuery, error) {
		pq, err := rego.New(rego.Query(q), rego.Compiler(compiler), rego.Store(store)).PrepareForEval(ctx)
		if err != nil {
			return pq, fmt.Errorf("%w: prepare %s: %v", ErrBundleRefused, q, err)
		}
		return pq, nil
	}
	s := &snapshot{revision: c.revision, cache: newDecisionCache(cacheEntries)}
	var err error
	if s.groups, err = prepare(queryGroups); err != nil {
		return nil, err
	}
	if s.clusters, err = prepare(queryClusters); err != nil {
		return nil, err
	}
	if s.admin, err = prepare(queryAdmin); err != nil {
		return nil, err
	}
	if len(compiler.GetRulesExact(ast.MustParseRef(queryGrants))) > 0 {
		g, err := prepare(queryGrants)
		if err != nil {
			return nil, err
		}
		s.grants = &g
	}
	if len(compiler.GetRulesExact(ast.MustParseRef(queryBotOIDC))) > 0 {
		b, err := prepare(queryBotOIDC)
		if err != nil {
			return nil, err
		}
		s.botOIDC = &b
	}
	for q, dst := range map[string]**rego.PreparedEvalQuery{queryRequestable: &s.requestable, queryMayApprove: &s.mayApprove} {
		if len(compiler.GetRulesExact(ast.MustParseRef(q))) == 0 {
			continue
		}
		pq, err := prepare(q)
		if err != nil {
			return nil, err
		}
		*dst = &pq
	}
	if err := checkData(ctx, prepare); err != nil {
		return nil, err
	}
	if s.scopes, err = scope.Parse(clientsData(c.data)); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBundleRefused, err)
	}
	s.fast, s.fastOff = newFastPath(c)
	if err := probe(ctx, s, c.data); err != nil {
		return nil, err
	}
	return s, nil
}

// clientsData is data.limen.config.clients, nil when absent (no client is
// registered: every decision is empty).
func clientsData(data map[string]any) any {
	limen, _ := data["limen"].(map[string]any)
	config, _ := limen["config"].(map[string]any)
	return config["clients"]
}

// checkData evaluates the bundle's own data validation.
func checkData(ctx context.Context, prepare func(string) (rego.PreparedEvalQuery, error)) error {
	pq, err := prepare(queryErrors)
	if err != nil {
		return err
	}
	rs, err := pq.Eval(ctx)
	if err != nil {
		return fmt.Errorf("%w: evaluate %s: %v", ErrBundleRefused, queryErrors, err)
	}
	msgs, err := stringsResult(rs)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBundleRefused, queryErrors, err)
	}
	if len(msgs) == 0 {
		return nil
	}
	slices.Sort(msgs)
	const shown = 10
	more := ""
	if len(msgs) > shown {
		more = fmt.Sprintf("; and %d more", len(msgs)-shown)
		msgs = msgs[:shown]
	}
	return fmt.Errorf("%w: policy data is invalid: %s%s", ErrBundleRefused, strings.Join(msgs, "; "), more)
}

// decideGroups is evalGroups from the fast path when the bundle has one.
func (s *snapshot) decideGroups(ctx context.Context, p identity.Principal, c Cluster, requested []string) (good, bad []string, err error) {
	if s.fast != nil {
		return s.fast.groups(p, c, requested), nil, nil
	}
	return s.evalGroups(ctx, groupsInput(p, c, requested))
}

// evalGroups runs the groups query and returns the granted groups, sorted,
// with any group outside valid_group split off into bad.
func (s *snapshot) evalGroups(ctx context.Context, input ast.Value) (good, bad []string, err error) {
	rs, err := s.groups.Eval(ctx, rego.EvalParsedInput(input))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: evaluate %s: %v", ErrUnavailable, queryGroups, err)
	}
	all, err := stringsResult(rs)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrUnavailable, queryGroups, err)
	}
	good = all[:0]
	for _, g := range all {
		if validGroup(g) {
			good = append(good, g)
		} else {
			bad = append(bad, g)
		}
	}
	slices.Sort(good)
	return slices.Compact(good), bad, nil
}

// stringsResult reads a set or array of strings; an undefined result is empty.
func stringsResult(rs rego.ResultSet) ([]string, error) {
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return nil, nil
	}
	vals, ok := rs[0].Expressions[0].Value.([]any)
	if !ok {
		return nil, fmt.Errorf("decision is %T, want a set of strings", rs[0].Expressions[0].Value)
	}
	out := make([]string, 0, len(vals))
	for _, v := range vals {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("decision holds %T %v, want only strings", v, v)
		}
		out = append(out, s)
	}
	return out, nil
}
