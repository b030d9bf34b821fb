# METADATA
# title: Limen policy data validation
# description: |
#   errors: every problem in data.limen.config, one message each. Limen
#   refuses to activate a bundle while this set is not empty, so a typo or a
#   system: group never reaches a decision.
package limen.validate

import data.limen.bots
import data.limen.roles

# config is the policy data; absent data is an empty (granting nothing) config.
default config := {}

config := data.limen.config

errors contains "data.limen.config must be an object with \"roles\" and \"bindings\"" if {
	not is_object(config)
}

errors contains sprintf("data.limen.config has unknown key %q (allowed: roles, bindings, bots, clients, requests)", [key]) if {
	some key, _ in config
	not key in {"roles", "bindings", "bots", "clients", "requests"}
}

# requests.<role> makes a role requestable (requests.rego).
errors contains "data.limen.config.requests must be an object mapping role names to their request terms" if {
	"requests" in object.keys(config)
	not is_object(config.requests)
}

errors contains sprintf("requests.%s: no such role in data.limen.config.roles", [role]) if {
	some role, _ in config.requests
	not config.roles[role]
}

errors contains sprintf("requests.%s has unknown key %q (allowed: requesters, approvers, maxDuration, reasonRequired, approvals, autoApproveUpTo)", [role, key]) if {
	some role, rule in config.requests
	some key, _ in rule
	not key in {"requesters", "approvers", "maxDuration", "reasonRequired", "approvals", "autoApproveUpTo"}
}

errors contains sprintf("requests.%s: role %q grants group %v, and a requestable role may never grant a \"system:\" group", [role, role, g]) if {
	some role, _ in config.requests
	some g in config.roles[role].groups
	startswith(lower(sprintf("%v", [g])), "system:")
}

errors contains sprintf("requests.%s: \"maxDuration\" must be a positive duration such as \"1h\"", [role]) if {
	some role, rule in config.requests
	not positive_duration(object.get(rule, "maxDuration", null))
}

errors contains sprintf("requests.%s: \"autoApproveUpTo\" must be a duration no longer than maxDuration", [role]) if {
	some role, rule in config.requests
	"autoApproveUpTo" in object.keys(rule)
	not auto_approve_ok(rule)
}

errors contains sprintf("requests.%s: \"approvals\" must be a whole number from 1 to 10", [role]) if {
	some role, rule in config.requests
	n := object.get(rule, "approvals", 1)
	not approvals_ok(n)
}

errors contains sprintf("requests.%s: \"reasonRequired\" must be true or false", [role]) if {
	some role, rule in config.requests
	not is_boolean(object.get(rule, "reasonRequired", false))
}

errors contains sprintf("requests.%s.%s must name \"roles\" (a list of role names) or \"traits\" (trait name to a list of values), and nothing else", [role, who]) if {
	some role, rule in config.requests
	some who in ["requesters", "approvers"]
	not valid_selector(object.get(rule, who, null))
}

errors contains sprintf("requests.%s.%s names unknown role %q", [role, who, r]) if {
	some role, rule in config.requests
	some who in ["requesters", "approvers"]
	some r in object.get(rule[who], "roles", [])
	is_string(r)
	not config.roles[r]
}

positive_duration(d) if {
	is_string(d)
	time.parse_duration_ns(d) > 0
}

auto_approve_ok(rule) if {
	is_string(rule.autoApproveUpTo)
	a := time.parse_duration_ns(rule.autoApproveUpTo)
	a >= 0
	a <= time.parse_duration_ns(rule.maxDuration)
}

approvals_ok(n) if {
	is_number(n)
	n == floor(n)
	n >= 1
	n <= 10
}

valid_selector(sel) if {
	is_object(sel)
	count(sel) > 0
	every k, _ in sel {
		k in {"roles", "traits"}
	}
	all_strings(object.get(sel, "roles", []))
	every _, values in object.get(sel, "traits", {}) {
		all_strings(values)
	}
}

# bots.<name>.oidc lists the CI tokens that log the bot in (bots.rego): each
# entry names a --ci-issuer and the claims, at least one, that must be equal.
errors contains sprintf("bots.%s has unknown key %q (allowed: oidc)", [name, key]) if {
	some name, bot in config.bots
	some key, _ in bot
	key != "oidc"
}

errors contains sprintf("bots.%s.oidc[%d] needs a string \"issuer\" and a non-empty \"claims\" object of strings", [name, i]) if {
	some name, bot in config.bots
	some i, rule in bot.oidc
	not valid_bot_oidc(rule)
}

# The issuers' kinds are the proxy's configuration, which a bundle does not
# know; an entry must pin an owner of some kind here, and at login one of
# the kind of the issuer that signed the token (bots.rego).
errors contains sprintf("bots.%s.oidc[%d].claims binds no owner: add repository_owner_id or repository_id (GitHub), namespace_id or project_id (GitLab) or sub (another issuer); without one, any repository's token for this proxy's audience can match", [name, i]) if {
	some name, bot in config.bots
	some i, rule in bot.oidc
	valid_bot_oidc(rule)
	not owner_bound_any(rule)
}

owner_bound_any(rule) if {
	some kind, _ in bots.owner_claims
	bots.owner_bound(rule, kind)
}

valid_bot_oidc(rule) if {
	is_string(rule.issuer)
	is_object(rule.claims)
	count(rule.claims) > 0
	every _, v in rule.claims {
		is_string(v)
	}
}

# The clients' own entries (scope lists, prefixes) are validated by Limen
# when the bundle activates (gateway/scope), with messages naming the key.
errors contains "data.limen.config.clients must be an object mapping client names to their entries" if {
	"clients" in object.keys(config)
	not is_object(config.clients)
}

errors contains sprintf("role %q: \"clients\" must be a list of client names (\"*\" for every registered client)", [name]) if {
	some name, role in config.roles
	not all_strings(object.get(role, "clients", []))
}

errors contains sprintf("role %q names client %q, which data.limen.config.clients does not register", [name, c]) if {
	some name, role in config.roles
	some c in object.get(role, "clients", [])
	is_string(c)
	c != "*"
	not object.get(config, "clients", {})[c]
}

errors contains sprintf("role %q must be an object with \"groups\" and \"clusters\"", [name]) if {
	some name, role in config.roles
	not is_object(role)
}

errors contains sprintf("role %q has unknown key %q (allowed: description, groups, clusters, clients, admin, adminClients)", [name, key]) if {
	some name, role in config.roles
	some key, _ in role
	not key in {"description", "groups", "clusters", "clients", "admin", "adminClients"}
}

errors contains sprintf("role %q: \"adminClients\" must be a list of application names", [name]) if {
	some name, role in config.roles
	not all_strings(object.get(role, "adminClients", []))
}

errors contains sprintf("role %q: adminClients names %q, which is not a registered application (kubectl and console need no entry; \"*\" is not allowed)", [name, c]) if {
	some name, role in config.roles
	some c in object.get(role, "adminClients", [])
	is_string(c)
	not admin_client_ok(config, c)
}

errors contains sprintf("role %q: \"groups\" must be a list of group names", [name]) if {
	some name, role in config.roles
	not is_array(object.get(role, "groups", []))
}

errors contains sprintf("role %q grants group %v: groups starting with \"system:\" are reserved for Kubernetes", [name, g]) if {
	some name, role in config.roles
	some g in role.groups
	is_string(g)
	startswith(lower(g), "system:")
}

errors contains sprintf("role %q grants %v: not a well-formed group name (letters, digits and \":._@-\", at most 253)", [name, g]) if {
	some name, role in config.roles
	some g in role.groups
	not startswith(lower(sprintf("%v", [g])), "system:")
	not roles.valid_group(g)
}

errors contains sprintf("role %q: \"clusters\" must be a list of selectors", [name]) if {
	some name, role in config.roles
	not is_array(object.get(role, "clusters", []))
}

errors contains sprintf("role %q: cluster selector %d must be an object", [name, i]) if {
	some [name, i, sel] in selectors
	not is_object(sel)
}

errors contains sprintf("role %q: cluster selector %d has unknown key %q (allowed: name, labels)", [name, i, key]) if {
	some [name, i, sel] in selectors
	some key, _ in sel
	not key in {"name", "labels"}
}

errors contains sprintf("role %q: cluster selector %d needs \"name\" (\"*\" for every cluster) or non-empty \"labels\"", [name, i]) if {
	some [name, i, sel] in selectors
	is_object(sel)
	not roles.has_selector(sel)
}

errors contains sprintf("role %q: cluster selector %d: \"name\" must be a non-empty string", [name, i]) if {
	some [name, i, sel] in selectors
	"name" in object.keys(sel)
	not non_empty_string(sel.name)
}

errors contains sprintf("role %q: cluster selector %d: \"labels\" must map label names to string values", [name, i]) if {
	some [name, i, sel] in selectors
	"labels" in object.keys(sel)
	not string_map(sel.labels)
}

errors contains sprintf("role %q: \"admin\" must be a list of action names", [name]) if {
	some name, role in config.roles
	admin := object.get(role, "admin", [])
	not all_strings(admin)
}

errors contains sprintf("bindings has unknown key %q (allowed: users, bots, traits, issuers)", [key]) if {
	some key, _ in config.bindings
	not key in {"users", "bots", "traits", "issuers"}
}

# bindings.issuers.<provider> binds the people of one identity provider (the
# proxy's --oidc-issuer-name): "users" by name, "traits" by trait value, in
# the shape of the local entries. Bots are always local.
errors contains sprintf("bindings.issuers.%s: %q is not an identity provider's name (1-63 lower-case letters, digits and inner hyphens; not local, bot, user or system...)", [iss, iss]) if {
	some iss, _ in config.bindings.issuers
	not valid_issuer(iss)
}

errors contains sprintf("bindings.issuers.%s has unknown key %q (allowed: users, traits)", [iss, key]) if {
	some iss, entry in config.bindings.issuers
	some key, _ in entry
	not key in {"users", "traits"}
}

errors contains sprintf("bindings.issuers.%s.users.%s must be a list of role names", [iss, who]) if {
	some iss, entry in config.bindings.issuers
	some who, bound in entry.users
	not all_strings(bound)
}

errors contains sprintf("bindings.issuers.%s.users.%s names unknown role %q", [iss, who, role]) if {
	some iss, entry in config.bindings.issuers
	some who, bound in entry.users
	some role in bound
	not config.roles[role]
}

errors contains sprintf("bindings.issuers.%s.traits.%s.%s must be a list of role names", [iss, trait, value]) if {
	some iss, entry in config.bindings.issuers
	some trait, values in entry.traits
	some value, bound in values
	not all_strings(bound)
}

errors contains sprintf("bindings.issuers.%s.traits.%s.%s names unknown role %q", [iss, trait, value, role]) if {
	some iss, entry in config.bindings.issuers
	some trait, values in entry.traits
	some value, bound in values
	some role in bound
	not config.roles[role]
}

# valid_issuer mirrors identity.ValidIssuer.
valid_issuer(s) if {
	is_string(s)
	regex.match(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`, s)
	not s in {"local", "bot", "user"}
	not startswith(s, "system")
}

errors contains sprintf("bindings.%s.%s must be a list of role names", [kind, who]) if {
	some kind in ["users", "bots"]
	some who, bound in config.bindings[kind]
	not all_strings(bound)
}

errors contains sprintf("bindings.%s.%s names unknown role %q", [kind, who, role]) if {
	some kind in ["users", "bots"]
	some who, bound in config.bindings[kind]
	some role in bound
	not config.roles[role]
}

errors contains sprintf("bindings.traits.%s.%s must be a list of role names", [trait, value]) if {
	some trait, values in config.bindings.traits
	some value, bound in values
	not all_strings(bound)
}

errors contains sprintf("bindings.traits.%s.%s names unknown role %q", [trait, value, role]) if {
	some trait, values in config.bindings.traits
	some value, bound in values
	some role in bound
	not config.roles[role]
}

all_strings(xs) if {
	is_array(xs)
	every x in xs {
		is_string(x)
	}
}

non_empty_string(s) if {
	is_string(s)
	s != ""
}

string_map(m) if {
	is_object(m)
	every k, v in m {
		is_string(k)
		is_string(v)
	}
}

# selectors lists every cluster selector as [role name, index, selector].
selectors contains [name, i, sel] if {
	some name, role in config.roles
	is_array(role.clusters)
	some i, sel in role.clusters
}

# admin_client_ok(config, c) holds for an application that config registers:
# not "*", and not Limen's own clients, which need no entry.
admin_client_ok(config, c) if {
	not c in {"*", "kubectl", "console"}
	object.get(config, "clients", {})[c]
}
