// Package access answers "what may I do" (DESIGN.md §7) with three answers
// per resource and verb: allowed, refused by Kubernetes, or out of scope —
// the last being Limen's client scope, which is checked first because a
// request outside it never reaches Kubernetes.
//
// Compute is pure: it takes the client's compiled scope and the rules the
// API server reported for the client's identity (a SelfSubjectRulesReview
// made through impersonation, so with the client's groups and user name),
// and lists the answers. The CLI (limen kube access) and the console show
// its Report.
package access

import (
	"slices"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/limenhq/limen/gateway/reqinfo"
	"github.com/limenhq/limen/gateway/scope"
)

// Answer is one of the three answers.
type Answer string

// The answers.
const (
	Allowed             Answer = "allowed"
	RefusedByKubernetes Answer = "refused by Kubernetes"
	OutOfScope          Answer = "out of scope"
)

// Verbs are the verbs a Report answers for, in this order.
var Verbs = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}

// Resource is one kind of object (or subresource) a Report covers.
type Resource struct {
	Group       string `json:"group"`
	Version     string `json:"version"`
	Resource    string `json:"resource"`
	Subresource string `json:"subresource,omitempty"`
}

// String is resource[/subresource][.group], as kubectl names it.
func (r Resource) String() string {
	s := r.Resource
	if r.Subresource != "" {
		s += "/" + r.Subresource
	}
	if r.Group != "" {
		s += "." + r.Group
	}
	return s
}

// Row is one resource's answers, one per verb of Verbs.
type Row struct {
	Resource
	Answers map[string]Answer `json:"answers"`
}

// Report is the answer for one client, cluster and namespace.
type Report struct {
	Cluster   string `json:"cluster"`
	Client    string `json:"client"`
	Namespace string `json:"namespace"`
	// Incomplete says Kubernetes could not list every rule (a webhook
	// authorizer, for example): a "refused by Kubernetes" may then be
	// allowed after all.
	Incomplete bool  `json:"incomplete,omitempty"`
	Rows       []Row `json:"rows"`
}

// Common resources every report covers, beside those the scope and the
// rules name.
var Common = []Resource{
	{Version: "v1", Resource: "pods"},
	{Version: "v1", Resource: "pods", Subresource: "log"},
	{Version: "v1", Resource: "pods", Subresource: "exec"},
	{Version: "v1", Resource: "configmaps"},
	{Version: "v1", Resource: "secrets"},
	{Version: "v1", Resource: "services"},
	{Group: "apps", Version: "v1", Resource: "deployments"},
}

// Compute answers, for each resource of resources (nil: Common) and each
// verb, in namespace: out of scope when sc refuses it (a nil scope refuses
// everything), otherwise allowed when the reviewed rules grant it, and
// refused by Kubernetes when they do not.
func Compute(sc *scope.Scope, namespace string, rules authorizationv1.SubjectRulesReviewStatus, resources []Resource) Report {
	if resources == nil {
		resources = Common
	}
	rep := Report{Namespace: namespace, Incomplete: rules.Incomplete}
	if sc != nil {
		rep.Client = sc.Client
	}
	for _, r := range resources {
		row := Row{Resource: r, Answers: make(map[string]Answer, len(Verbs))}
		for _, v := range Verbs {
			info := &reqinfo.Info{IsResourceRequest: true, Verb: v, APIGroup: r.Group, APIVersion: r.Version,
				Resource: r.Resource, Subresource: r.Subresource, Namespace: namespace}
			switch {
			case !sc.Allows(info, ""):
				row.Answers[v] = OutOfScope
			case rbacAllows(rules.ResourceRules, r, v):
				row.Answers[v] = Allowed
			default:
				row.Answers[v] = RefusedByKubernetes
			}
		}
		rep.Rows = append(rep.Rows, row)
	}
	return rep
}

// rbacAllows reports whether a rule grants verb on every object of r (a
// rule limited to resource names does not).
func rbacAllows(rules []authorizationv1.ResourceRule, r Resource, verb string) bool {
	name := r.Resource
	if r.Subresource != "" {
		name += "/" + r.Subresource
	}
	for _, rule := range rules {
		if len(rule.ResourceNames) > 0 {
			continue
		}
		if !matchesAny(rule.Verbs, verb) || !matchesAny(rule.APIGroups, r.Group) {
			continue
		}
		for _, res := range rule.Resources {
			if res == "*" || res == name || (r.Subresource != "" && res == "*/"+r.Subresource) {
				return true
			}
		}
	}
	return false
}

func matchesAny(list []string, s string) bool {
	return slices.Contains(list, "*") || slices.Contains(list, s)
}

// ResourcesFor is Common plus every resource and subresource sc lists,
// without duplicates: what a report for the client should cover.
func ResourcesFor(sc *scope.Scope) []Resource {
	out := slices.Clone(Common)
	add := func(r Resource) {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	for _, k := range sc.Kinds() {
		add(Resource{Group: k.Group, Version: k.Version, Resource: k.Resource})
		for _, sub := range k.Subresources {
			add(Resource{Group: k.Group, Version: k.Version, Resource: k.Resource, Subresource: sub})
		}
	}
	return out
}

// RulesReviewPath is where the proxy posts the SelfSubjectRulesReview.
const RulesReviewPath = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews"

// IsRulesReview reports whether info is the creation of a
// SelfSubjectRulesReview: the one request an access-review grant carries.
func IsRulesReview(info *reqinfo.Info) bool {
	return info != nil && info.IsResourceRequest && info.Verb == "create" && info.APIGroup == "authorization.k8s.io" &&
		info.APIVersion == "v1" && info.Resource == "selfsubjectrulesreviews" && info.Subresource == "" && info.Namespace == "" && info.Name == ""
}
