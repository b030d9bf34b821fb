# METADATA
# title: Limen Kubernetes decisions
# description: |
#   groups: the Kubernetes groups input.principal may assume on input.cluster
#   through input.client (the one client its credential names).
#   clusters: the names, among input.clusters, on which input.principal may
#   assume at least one group. grants: for explanations, each granting role
#   with the groups it contributes.
package limen.kube

import data.limen.requests
import data.limen.roles

# grants maps each role bound to input.principal that selects input.cluster
# to the valid groups it grants there.
grants[role] := granted if {
	roles.registered(input.client)
	some role in roles.bound
	roles.serves(role, input.client)
	roles.selects(role, input.cluster)
	granted := {g | some g in data.limen.config.roles[role].groups; roles.valid_group(g)}
	count(granted) > 0
}

# A role held through an approved access request (requests.elevated)
# grants its groups as if bound, on the one cluster it was requested for.
grants[role] := granted if {
	roles.registered(input.client)
	some role in requests.elevated
	roles.serves(role, input.client)
	granted := {g | some g in data.limen.config.roles[role].groups; roles.valid_group(g)}
	count(granted) > 0
}

# groups is the set of group names input.principal may assume on input.cluster.
# It is the hot path (every proxied request on a cache miss), so it inlines
# roles.selects and roles.valid_group: OPA charges for every function call.
groups contains g if {
	data.limen.config.clients[input.client]
	some role in roles.bound
	r := data.limen.config.roles[role]
	some c in object.get(r, "clients", ["kubectl"])
	c in {"*", input.client}
	some sel in r.clusters
	object.get(sel, "name", input.cluster.name) in {"*", input.cluster.name}
	object.subset(object.get(input.cluster, "labels", {}), object.get(sel, "labels", {}))
	some g in r.groups
	not startswith(lower(g), "system:")
	regex.match(`^[A-Za-z0-9][A-Za-z0-9:._@-]{0,252}$`, g)
}

groups contains g if {
	data.limen.config.clients[input.client]
	some role in requests.elevated
	roles.serves(role, input.client)
	some g in data.limen.config.roles[role].groups
	roles.valid_group(g)
}

# clusters is the set of names of input.clusters where input.principal may
# assume at least one group.
clusters contains cluster.name if {
	roles.registered(input.client)
	some cluster in input.clusters
	some role in roles.bound
	roles.serves(role, input.client)
	roles.selects(role, cluster)
	some g in data.limen.config.roles[role].groups
	roles.valid_group(g)
}
