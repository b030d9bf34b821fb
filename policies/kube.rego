# METADATA
# title: Limen Kubernetes decisions
# description: |
#   groups: the Kubernetes groups input.principal may assume on input.cluster.
#   clusters: the names, among input.clusters, on which input.principal may
#   assume at least one group. grants: for explanations, each granting role
#   with the groups it contributes.
package limen.kube

import data.limen.roles

# grants maps each role bound to input.principal that selects input.cluster
# to the valid groups it grants there.
grants[role] := granted if {
	some role in roles.bound
	roles.selects(role, input.cluster)
	granted := {g | some g in data.limen.config.roles[role].groups; roles.valid_group(g)}
	count(granted) > 0
}

# groups is the set of group names input.principal may assume on input.cluster.
groups := {g | some granted in grants; some g in granted}

# clusters is the set of names of input.clusters where input.principal may
# assume at least one group.
clusters contains cluster.name if {
	some cluster in input.clusters
	some role in roles.bound
	roles.selects(role, cluster)
	some g in data.limen.config.roles[role].groups
	roles.valid_group(g)
}
