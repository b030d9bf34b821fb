# METADATA
# title: Limen access requests
# description: |
#   Just-in-time access: data.limen.config.requests names the roles a
#   principal may ask for, for how long, whether with a reason, how many
#   approvals they need and who may approve (docs/ACCESS-REQUESTS.md).
#
#   requestable: input {client, principal, cluster} -> object of the roles
#     input.principal may request on input.cluster, each with its terms
#     (maxDuration and autoApproveUpTo in nanoseconds, reasonRequired,
#     approvals).
#   may_approve: input {client, principal, request: {role, cluster,
#     requester}} -> whether input.principal may approve the request.
#     Never the requester, never through an application's credential.
#   elevated: the roles of input.requested that input.principal may still
#     request on input.cluster; kube.groups adds their groups. Limen puts in
#     input.requested only the roles of approved, unexpired requests for
#     the cluster; this rule makes the worker's own policy agree.
package limen.requests

import data.limen.roles

# rules are the requestable roles' terms, keyed by role name.
rules := object.get(data.limen.config, "requests", {})

# first_party are the clients through which requests are made and approved.
first_party := {"kubectl", "console"}

requestable[role] := terms(rule) if {
	input.client in first_party
	some role, rule in rules
	matches(rule.requesters)
	roles.selects(role, input.cluster)
}

terms(rule) := {
	"maxDuration": time.parse_duration_ns(rule.maxDuration),
	"autoApproveUpTo": time.parse_duration_ns(object.get(rule, "autoApproveUpTo", "0s")),
	"reasonRequired": object.get(rule, "reasonRequired", false),
	"approvals": object.get(rule, "approvals", 1),
}

elevated contains role if {
	some role in input.requested
	rule := rules[role]
	matches(rule.requesters)
	roles.selects(role, input.cluster)
}

default may_approve := false

may_approve if {
	input.client in first_party
	rule := rules[input.request.role]
	matches(rule.approvers)
	not same_principal(input.principal, input.request.requester)
}

# same_principal holds when two principals are one: kind, provenance and
# name (identity.Principal.Same).
same_principal(a, b) if {
	a.kind == b.kind
	a.name == b.name
	object.get(a, "issuer", "") == object.get(b, "issuer", "")
}

# matches(sel) holds when input.principal holds one of sel.roles (bound to
# it, never one it holds by a request), or, for a local principal, has one
# of the values sel.traits lists. A provider's people match by role, bound
# under bindings.issuers, so that two sources never share a trait.
matches(sel) if {
	some role in object.get(sel, "roles", [])
	role in roles.bound
}

matches(sel) if {
	roles.provenance == ""
	some trait, values in object.get(sel, "traits", {})
	some v in object.get(input.principal.traits, trait, [])
	v in values
}
