# METADATA
# title: Limen role model
# description: |
#   Shared rules: which roles are bound to the principal in input, whether a
#   role selects a cluster, and which group names Limen may ever grant. The
#   data lives under data.limen.config (see policies/README.md) and is keyed
#   for direct lookups, so a decision costs the same with ten bindings or ten
#   thousand.
package limen.roles

# provenance is where input.principal comes from: "" for Limen's own users
# and bots, otherwise the name of the identity provider that signed it in
# (--oidc-issuer-name). Limen always sends it; an input without it (a
# hand-written one) is a local principal.
provenance := object.get(input.principal, "issuer", "")

# bound is the set of role names bound to input.principal, by name or by
# trait. A principal binds only through its own source's entries, so two
# sources never share a name (DESIGN.md §2): local users and bots through
# bindings.users, bindings.bots and bindings.traits; a provider's users
# through bindings.issuers[provider].users and .traits. The provider's bob
# is not the local bob, and a local user named after a provider's person
# does not get that person's roles.
bound contains role if {
	provenance == ""
	input.principal.kind == "user"
	some role in data.limen.config.bindings.users[input.principal.name]
}

bound contains role if {
	provenance == ""
	input.principal.kind == "bot"
	some role in data.limen.config.bindings.bots[input.principal.name]
}

bound contains role if {
	provenance == ""
	some trait, values in input.principal.traits
	some value in values
	some role in data.limen.config.bindings.traits[trait][value]
}

bound contains role if {
	provenance != ""
	input.principal.kind == "user"
	some role in data.limen.config.bindings.issuers[provenance].users[input.principal.name]
}

bound contains role if {
	provenance != ""
	input.principal.kind == "user"
	some trait, values in input.principal.traits
	some value in values
	some role in data.limen.config.bindings.issuers[provenance].traits[trait][value]
}

# selects(role, cluster) holds when one of the role's cluster selectors matches
# cluster. A selector names a cluster ("*" for any), lists labels that must
# all be equal, or both; data validation refuses a selector with neither, so
# the hot path does not check again.
selects(role, cluster) if {
	some sel in data.limen.config.roles[role].clusters
	object.get(sel, "name", cluster.name) in {"*", cluster.name}
	object.subset(object.get(cluster, "labels", {}), object.get(sel, "labels", {}))
}

# serves(role, client) holds when the role applies to credentials of
# client: one its "clients" list names, or any registered client for "*".
# A role without "clients" serves the command line (kubectl) only, so a new
# application gets no group until a role names it: one person's groups reach
# a second client only where policy says so.
serves(role, client) if {
	some c in object.get(data.limen.config.roles[role], "clients", ["kubectl"])
	c in {"*", client}
}

# registered(client) holds for a client the policy data registers; every
# other client, and a credential with none, gets nothing.
registered(client) if {
	is_string(client)
	data.limen.config.clients[client]
}

# has_selector(sel) holds when sel names a cluster or lists labels.
has_selector(sel) if sel.name

has_selector(sel) if count(sel.labels) > 0

# valid_group(g) holds for group names Limen may grant: 1-253 characters of
# letters, digits and ":._@-", starting with a letter or digit, and never in
# the "system:" namespace that Kubernetes reserves for itself.
valid_group(g) if {
	is_string(g)
	count(g) <= 253
	not startswith(lower(g), "system:")
	regex.match(`^[A-Za-z0-9][A-Za-z0-9:._@-]*$`, g)
}
