// Package requests is just-in-time access (docs/ACCESS-REQUESTS.md): a
// principal requests a role on one cluster for a while, with a reason;
// approvers whom policy names approve or deny it; once approved, the
// requester's next credential carries the role (identity.Elevation) until
// the request expires, and not a second longer.
//
// The rules live here: what policy lets a principal request and on what
// terms, who may approve (never the requester), how many approvals make a
// request approved, when it expires. Requests are kept in the shared store
// (store.Requests) so that every proxy honours the same approvals; every
// step, and every refusal, is audited with who and why.
package requests

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"

	"github.com/limenhq/limen/gateway/audit"
	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/kpath"
	"github.com/limenhq/limen/gateway/policy"
	"github.com/limenhq/limen/gateway/store"
)

// State is where a request stands.
type State string

// The states of a request. Pending moves to approved or denied, or lapses
// to expired; approved moves to expired when its access ends.
const (
	StatePending  State = "pending"
	StateApproved State = "approved"
	StateDenied   State = "denied"
	StateExpired  State = "expired"
)

// Decision is one approver's approval or denial.
type Decision struct {
	By     identity.Principal `json:"by"`
	Reason string             `json:"reason,omitempty"`
	At     time.Time          `json:"at"`
	// Policy marks an approval that policy gave itself (autoApproveUpTo).
	Policy bool `json:"policy,omitempty"`
}

// Request is one access request.
type Request struct {
	ID string `json:"id"`
	// Requester is who asked, without traits or carried requests.
	Requester identity.Principal `json:"requester"`
	Role      string             `json:"role"`
	Cluster   string             `json:"cluster"`
	Reason    string             `json:"reason,omitempty"`
	// Duration is how long the access lasts once approved.
	Duration time.Duration `json:"duration"`
	State    State         `json:"state"`
	Created  time.Time     `json:"created"`
	// Expires is when a pending request lapses, or when an approved one's
	// access ends.
	Expires time.Time `json:"expires"`
	// Needed is how many approvals the request needs (policy, at creation).
	Needed    int        `json:"needed"`
	Approvals []Decision `json:"approvals,omitempty"`
	Denial    *Decision  `json:"denial,omitempty"`
}

// Elevation is what an approved request lends its requester.
func (r Request) Elevation() identity.Elevation {
	return identity.Elevation{Request: r.ID, Role: r.Role, Cluster: r.Cluster, Expires: r.Expires}
}

// Errors of the service; the HTTP layer maps them to status codes.
var (
	// ErrNotFound: no request has that id.
	ErrNotFound = errors.New("no such access request")
	// ErrRefused: policy, or a rule of this package, refuses the step (403).
	ErrRefused = errors.New("refused")
	// ErrInvalid: the request is malformed (400).
	ErrInvalid = errors.New("invalid access request")
	// ErrConflict: the request is no longer in a state that allows the
	// step (409): decided, expired, or approved by this approver already.
	ErrConflict = errors.New("access request conflict")
	// ErrUnavailable: the store, policy or audit trail failed (503).
	ErrUnavailable = errors.New("access requests unavailable")
)

// Policy is the policy the service asks (*policy.Engine).
type Policy interface {
	Requestable(ctx context.Context, p identity.Principal, c policy.Cluster) (map[string]policy.RequestTerms, error)
	MayApprove(ctx context.Context, approver, requester identity.Principal, role string, c policy.Cluster) (bool, error)
}

// DefaultPendingTTL is how long a request waits for its approvals before
// it lapses.
const DefaultPendingTTL = 24 * time.Hour

// MaxReasonLen bounds a reason.
const MaxReasonLen = 500

// Service keeps access requests. Store, Policy, Audit and Clusters are
// required.
type Service struct {
	Store  store.Requests
	Policy Policy
	Audit  audit.Sink
	// Clusters returns the labels policy sees for a cluster name.
	Clusters func(name string) policy.Cluster
	// PendingTTL is how long a request waits for approval; zero is
	// DefaultPendingTTL.
	PendingTTL time.Duration
	Now        func() time.Time
	Logger     *slog.Logger
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Service) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

// Ask is what a requester asks for.
type Ask struct {
	Role     string
	Cluster  string
	Duration time.Duration
	Reason   string
}

// Requestable returns the roles p may request on cluster, with their terms.
func (s *Service) Requestable(ctx context.Context, p identity.Principal, cluster string) (map[string]policy.RequestTerms, error) {
	if err := kpath.ValidCluster(cluster); err != nil {
		return nil, fmt.Errorf("%w: cluster: %v", ErrInvalid, err)
	}
	t, err := s.Policy.Requestable(ctx, p, s.Clusters(cluster))
	if err != nil {
		return nil, fmt.Errorf("%w: policy: %v", ErrUnavailable, err)
	}
	return t, nil
}

// Create makes p's request, approved at once when policy says its duration
// needs no approver, and returns it. A refusal is audited (auth.denied).
func (s *Service) Create(ctx context.Context, p identity.Principal, a Ask) (Request, error) {
	a.Reason = strings.TrimSpace(a.Reason)
	if err := a.validate(); err != nil {
		return Request{}, err
	}
	terms, err := s.Requestable(ctx, p, a.Cluster)
	if err != nil {
		return Request{}, err
	}
	t, ok := terms[a.Role]
	switch {
	case !ok:
		return Request{}, s.refuse(ctx, p, a.Role, a.Cluster, "", fmt.Sprintf("policy does not let %s request role %q on cluster %q (limen kube access %s lists what you may request)",
			p.String(), a.Role, a.Cluster, a.Cluster))
	case a.Duration > t.MaxDuration:
		return Request{}, s.refuse(ctx, p, a.Role, a.Cluster, "", fmt.Sprintf("role %q may be requested for at most %s on cluster %q; you asked for %s",
			a.Role, t.MaxDuration, a.Cluster, a.Duration))
	case t.ReasonRequired && a.Reason == "":
		return Request{}, s.refuse(ctx, p, a.Role, a.Cluster, "", fmt.Sprintf("role %q needs a reason: add --reason, for example --reason \"INC-123: restart the api pods\"", a.Role))
	}
	id, err := newID()
	if err != nil {
		return Request{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	now := s.now()
	ttl := s.PendingTTL
	if ttl <= 0 {
		ttl = DefaultPendingTTL
	}
	r := Request{ID: id, Requester: requester(p), Role: a.Role, Cluster: a.Cluster, Reason: a.Reason, Duration: a.Duration,
		State: StatePending, Created: now, Expires: now.Add(ttl), Needed: t.Approvals}
	auto := t.AutoApproveUpTo > 0 && a.Duration <= t.AutoApproveUpTo
	if auto {
		r.State, r.Expires = StateApproved, accessEnd(now, a.Duration)
		r.Approvals = []Decision{{By: r.Requester, At: now, Policy: true, Reason: "policy: autoApproveUpTo " + t.AutoApproveUpTo.String()}}
	}
	rec, err := record(r)
	if err != nil {
		return Request{}, err
	}
	// Audited first: a request nobody can trace is not made.
	if err := s.emit(ctx, audit.TypeAccessRequest, p, r, a.Reason, nil); err != nil {
		return Request{}, err
	}
	if err := s.Store.Insert(ctx, rec); err != nil {
		return Request{}, fmt.Errorf("%w: store: %v", ErrUnavailable, err)
	}
	if auto {
		if err := s.emit(ctx, audit.TypeAccessApprove, p, r, r.Approvals[0].Reason, map[string]string{"by": "policy"}); err != nil {
			s.logger().Error("audit access.approve by policy", "request", r.ID, "err", err)
		}
	}
	return r, nil
}

// accessEnd is when access granted at now for d ends: in whole seconds, as
// certificates carry it (ca.EncodeRequests), so that every hop ends it at
// the same instant.
func accessEnd(now time.Time, d time.Duration) time.Time {
	return now.Add(d).Truncate(time.Second)
}

func (a Ask) validate() error {
	if err := identity.ValidName(a.Role); err != nil {
		return fmt.Errorf("%w: role: %v", ErrInvalid, err)
	}
	if err := kpath.ValidCluster(a.Cluster); err != nil {
		return fmt.Errorf("%w: cluster: %v", ErrInvalid, err)
	}
	if a.Duration < time.Second {
		return fmt.Errorf("%w: duration %s: ask for at least 1s, for example --for 1h", ErrInvalid, a.Duration)
	}
	return validReason(a.Reason)
}

func validReason(s string) error {
	if len(s) > MaxReasonLen {
		return fmt.Errorf("%w: the reason is %d bytes, at most %d are allowed", ErrInvalid, len(s), MaxReasonLen)
	}
	for _, c := range s {
		if c == unicode.ReplacementChar || !unicode.IsPrint(c) {
			return fmt.Errorf("%w: the reason holds a character that is not printable", ErrInvalid)
		}
	}
	return nil
}

// requester is p as a request names it: who, never what it carries.
func requester(p identity.Principal) identity.Principal {
	return identity.Principal{Kind: p.Kind, Name: p.Name, Issuer: p.Issuer}
}

// Get returns request id.
func (s *Service) Get(ctx context.Context, id string) (Request, error) {
	rec, err := s.Store.Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return Request{}, fmt.Errorf("%w: %q (limen requests ls lists them)", ErrNotFound, id)
	}
	if err != nil {
		return Request{}, fmt.Errorf("%w: store: %v", ErrUnavailable, err)
	}
	return decode(rec)
}

// Approve records approver's approval of request id; the request is
// approved, and its access starts, with its last needed approval.
func (s *Service) Approve(ctx context.Context, approver identity.Principal, id, reason string) (Request, error) {
	return s.decide(ctx, approver, id, strings.TrimSpace(reason), true)
}

// Deny denies request id. Whoever may approve it may deny it.
func (s *Service) Deny(ctx context.Context, approver identity.Principal, id, reason string) (Request, error) {
	return s.decide(ctx, approver, id, strings.TrimSpace(reason), false)
}

func (s *Service) decide(ctx context.Context, by identity.Principal, id, reason string, approve bool) (Request, error) {
	if err := validReason(reason); err != nil {
		return Request{}, err
	}
	if err := identity.ValidName(id); err != nil {
		return Request{}, fmt.Errorf("%w: request id: %v", ErrInvalid, err)
	}
	r, err := s.Get(ctx, id)
	if err != nil {
		return Request{}, err
	}
	verb := "approve"
	if !approve {
		verb = "deny"
	}
	if by.Same(r.Requester) {
		return Request{}, s.refuse(ctx, by, r.Role, r.Cluster, r.ID, fmt.Sprintf("you cannot %s your own request %s: another approver must", verb, r.ID))
	}
	ok, err := s.Policy.MayApprove(ctx, by, r.Requester, r.Role, s.Clusters(r.Cluster))
	if err != nil {
		return Request{}, fmt.Errorf("%w: policy: %v", ErrUnavailable, err)
	}
	if !ok {
		return Request{}, s.refuse(ctx, by, r.Role, r.Cluster, r.ID, fmt.Sprintf("policy does not let %s %s requests for role %q on cluster %q", by.String(), verb, r.Role, r.Cluster))
	}
	var out Request
	err = s.Store.Update(ctx, id, func(rec *store.RequestRecord) error {
		cur, err := decode(*rec)
		if err != nil {
			return err
		}
		now := s.now()
		if cur.State != StatePending {
			return fmt.Errorf("%w: request %s is %s already", ErrConflict, id, cur.State)
		}
		if !now.Before(cur.Expires) {
			return fmt.Errorf("%w: request %s lapsed unapproved at %s; the requester asks again", ErrConflict, id, cur.Expires.UTC().Format(time.RFC3339))
		}
		d := Decision{By: requester(by), Reason: reason, At: now}
		typ := audit.TypeAccessDeny
		if approve {
			for _, a := range cur.Approvals {
				if a.By.Same(by) {
					return fmt.Errorf("%w: you approved request %s already; it needs %d approvals from different approvers", ErrConflict, id, cur.Needed)
				}
			}
			typ = audit.TypeAccessApprove
			cur.Approvals = append(cur.Approvals, d)
			if len(cur.Approvals) >= cur.Needed {
				// The access starts with the last approval, for the
				// duration asked: never from the moment of asking.
				cur.State, cur.Expires = StateApproved, accessEnd(now, cur.Duration)
			}
		} else {
			cur.State, cur.Denial = StateDenied, &d
		}
		next, err := record(cur)
		if err != nil {
			return err
		}
		// Audited inside the transaction: a decision that cannot be
		// traced is not taken.
		if err := s.emit(ctx, typ, by, cur, reason, map[string]string{"approvals": fmt.Sprintf("%d/%d", len(cur.Approvals), cur.Needed)}); err != nil {
			return err
		}
		*rec, out = next, cur
		return nil
	})
	switch {
	case err == nil:
		return out, nil
	case errors.Is(err, store.ErrNotFound):
		return Request{}, fmt.Errorf("%w: %q", ErrNotFound, id)
	case errors.Is(err, ErrConflict), errors.Is(err, ErrUnavailable):
		return Request{}, err
	default:
		return Request{}, fmt.Errorf("%w: store: %v", ErrUnavailable, err)
	}
}

// Check confirms that e, carried by p's credential, is an approved request
// of p's, for that role and cluster, whose access has not ended at now. The
// proxy calls it on every request that would use e: a request that
// expired, or whose record says otherwise, lends nothing.
func (s *Service) Check(ctx context.Context, p identity.Principal, e identity.Elevation) error {
	r, err := s.Get(ctx, e.Request)
	if err != nil {
		return err
	}
	now := s.now()
	switch {
	case !r.Requester.Same(p):
		return fmt.Errorf("%w: request %s is not %s's", ErrRefused, e.Request, p.String())
	case r.Role != e.Role || r.Cluster != e.Cluster:
		return fmt.Errorf("%w: request %s is for role %q on %q, not %q on %q", ErrRefused, e.Request, r.Role, r.Cluster, e.Role, e.Cluster)
	case r.State != StateApproved:
		return fmt.Errorf("%w: request %s is %s", ErrRefused, e.Request, r.State)
	case !now.Before(r.Expires):
		return fmt.Errorf("%w: request %s expired at %s", ErrRefused, e.Request, r.Expires.UTC().Format(time.RFC3339))
	case e.Expires.After(r.Expires):
		return fmt.Errorf("%w: the credential claims request %s lasts past its expiry", ErrRefused, e.Request)
	}
	return nil
}

// Credential returns, among ids, p's approved requests whose access has not
// ended, as elevations for p's next certificate, and every one of ids as
// the store knows it (so the client can forget those that ended). Ids that
// are not p's, or unknown, are left out of both.
func (s *Service) Credential(ctx context.Context, p identity.Principal, ids []string) ([]identity.Elevation, []Request, error) {
	if len(ids) > identity.MaxElevations {
		return nil, nil, fmt.Errorf("%w: %d request ids, at most %d at once", ErrInvalid, len(ids), identity.MaxElevations)
	}
	now := s.now()
	var els []identity.Elevation
	var known []Request
	for _, id := range ids {
		if identity.ValidName(id) != nil {
			continue
		}
		r, err := s.Get(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		if !r.Requester.Same(p) {
			continue
		}
		known = append(known, r)
		if r.State == StateApproved && now.Before(r.Expires) {
			els = append(els, r.Elevation())
		}
	}
	return els, known, nil
}

// Filter selects requests to list.
type Filter struct {
	// State keeps requests in that state; "" keeps all.
	State State
	Limit int
}

// List returns the requests viewer made and those viewer may decide
// (pending ones policy lets viewer approve), the newest first.
func (s *Service) List(ctx context.Context, viewer identity.Principal, f Filter) ([]Request, error) {
	limit := f.Limit
	if limit <= 0 || limit > 500 {
		limit = 100
	}
	recs, err := s.Store.List(ctx, string(f.State), 0, 1000)
	if err != nil {
		return nil, fmt.Errorf("%w: store: %v", ErrUnavailable, err)
	}
	var out []Request
	for _, rec := range recs {
		if len(out) == limit {
			break
		}
		r, err := decode(rec)
		if err != nil {
			return nil, err
		}
		if r.Requester.Same(viewer) {
			out = append(out, r)
			continue
		}
		ok, err := s.Policy.MayApprove(ctx, viewer, r.Requester, r.Role, s.Clusters(r.Cluster))
		if err != nil {
			return nil, fmt.Errorf("%w: policy: %v", ErrUnavailable, err)
		}
		if ok {
			out = append(out, r)
		}
	}
	return out, nil
}

// Expire ends the approved requests whose access is over and the pending
// ones that lapsed, each audited (access.expire) by the proxy that ends
// it, and returns how many it ended. Several proxies may sweep at once:
// the store's Update lets one end each request.
func (s *Service) Expire(ctx context.Context) (int, error) {
	now := s.now()
	return s.endEach(ctx, now.UnixNano()+1, nil, "", func(cur *Request) bool { return !now.Before(cur.Expires) })
}

// endEach ends, as expired, each approved or pending request the store
// lists as expiring before beforeNS (0: all) that pick keeps (nil: all),
// and whose current state end agrees to end (it may change the request,
// its expiry), each in one Update of the store and audited
// (access.expire) with why. It returns how many it ended.
func (s *Service) endEach(ctx context.Context, beforeNS int64, pick func(store.RequestRecord) bool, why string, end func(cur *Request) bool) (int, error) {
	n := 0
	for _, st := range []State{StateApproved, StatePending} {
		recs, err := s.Store.List(ctx, string(st), beforeNS, 1000)
		if err != nil {
			return n, fmt.Errorf("%w: store: %v", ErrUnavailable, err)
		}
		for _, rec := range recs {
			if pick != nil && !pick(rec) {
				continue
			}
			err := s.Store.Update(ctx, rec.ID, func(rec *store.RequestRecord) error {
				cur, err := decode(*rec)
				if err != nil {
					return err
				}
				if cur.State != st || !end(&cur) {
					return errSkip
				}
				cur.State = StateExpired
				next, err := record(cur)
				if err != nil {
					return err
				}
				if err := s.emit(ctx, audit.TypeAccessExpire, cur.Requester, cur, why, map[string]string{"was": string(st)}); err != nil {
					return err
				}
				*rec = next
				return nil
			})
			switch {
			case err == nil:
				n++
			case errors.Is(err, errSkip):
			default:
				return n, err
			}
		}
	}
	return n, nil
}

var errSkip = errors.New("skip")

// Sweep runs Expire every interval until ctx ends.
func (s *Service) Sweep(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := s.Expire(ctx); err != nil && ctx.Err() == nil {
				s.logger().Warn("expire access requests", "err", err)
			}
		}
	}
}

// refuse audits a refused step and returns the refusal.
func (s *Service) refuse(ctx context.Context, p identity.Principal, role, cluster, id, msg string) error {
	ev := audit.Event{Type: audit.TypeAuthDenied, Time: s.now(), Principal: p, Cluster: cluster,
		Denied: &audit.Denied{Hop: audit.HopProxy, Action: audit.ActionAccess, Reason: "access request: " + msg},
		Fields: map[string]string{"role": role}}
	if id != "" {
		ev.Fields["request"] = id
	}
	if err := s.Audit.Emit(ctx, ev); err != nil {
		s.logger().Error("audit refused access request", "err", err, "reason", msg)
	}
	return fmt.Errorf("%w: %s", ErrRefused, msg)
}

// emit audits one step of r by p. An error means the step must not happen.
func (s *Service) emit(ctx context.Context, typ audit.Type, p identity.Principal, r Request, reason string, extra map[string]string) error {
	f := map[string]string{
		"request": r.ID, "role": r.Role, "requester": r.Requester.String(), "state": string(r.State),
		"duration": r.Duration.String(), "expires": r.Expires.UTC().Format(time.RFC3339),
	}
	if reason != "" {
		f["reason"] = reason
	}
	for k, v := range extra {
		f[k] = v
	}
	if err := s.Audit.Emit(ctx, audit.Event{Type: typ, Time: s.now(), Principal: p, Cluster: r.Cluster, Fields: f}); err != nil {
		return fmt.Errorf("%w: audit: %v", ErrUnavailable, err)
	}
	return nil
}

func record(r Request) (store.RequestRecord, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return store.RequestRecord{}, fmt.Errorf("%w: encode request: %v", ErrUnavailable, err)
	}
	return store.RequestRecord{ID: r.ID, Requester: r.Requester.String(), State: string(r.State),
		Created: r.Created.UnixNano(), Expires: r.Expires.UnixNano(), Data: string(data)}, nil
}

func decode(rec store.RequestRecord) (Request, error) {
	var r Request
	if err := json.Unmarshal([]byte(rec.Data), &r); err != nil {
		return Request{}, fmt.Errorf("%w: stored request %s: %v", ErrUnavailable, rec.ID, err)
	}
	return r, nil
}

// newID is a request id: "req-" and 16 random base32 characters.
func newID() (string, error) {
	var b [10]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "req-" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:])), nil
}

// EndFor ends every approved or pending request of who, audited
// (access.expire) with why: a lock ends a principal's requests for good,
// so that an unlock does not bring them back. It returns how many ended.
func (s *Service) EndFor(ctx context.Context, who identity.Principal, why string) (int, error) {
	mine := requester(who).String()
	return s.endEach(ctx, 0, func(rec store.RequestRecord) bool { return rec.Requester == mine }, why,
		func(cur *Request) bool { cur.Expires = s.now(); return true })
}
