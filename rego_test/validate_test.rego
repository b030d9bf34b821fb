package limen.validate_test

import data.limen.fixtures
import data.limen.validate

errors_for(config) := errs if {
	errs := validate.errors with data.limen.config as config
}

test_fixtures_are_valid if {
	errors_for(fixtures.config) == set()
}

test_no_config_is_valid if {
	validate.errors == set()
}

test_config_not_object if {
	count(errors_for("roles")) == 1
}

test_unknown_top_level_key if {
	errors_for({"roles": {}, "bindings": {}, "rolez": {}}) == {`data.limen.config has unknown key "rolez" (allowed: roles, bindings, bots, clients, requests)`}
}

test_empty_selector_refused if {
	errs := errors_for({"roles": {"r": {"groups": ["g"], "clusters": [{}]}}})
	errs == {`role "r": cluster selector 0 needs "name" ("*" for every cluster) or non-empty "labels"`}
}

test_misspelt_selector_refused if {
	errs := errors_for({"roles": {"r": {"groups": ["g"], "clusters": [{"nmae": "demo"}]}}})
	count(errs) == 2
}

test_bad_label_values if {
	errs := errors_for({"roles": {"r": {"groups": ["g"], "clusters": [{"labels": {"env": 1}}]}}})
	errs == {`role "r": cluster selector 0: "labels" must map label names to string values`}
}

test_unknown_role_in_binding if {
	errs := errors_for({"roles": {}, "bindings": {"users": {"a": ["ghost"]}, "traits": {"groups": {"dev": ["ghost"]}}}})
	errs == {
		`bindings.users.a names unknown role "ghost"`,
		`bindings.traits.groups.dev names unknown role "ghost"`,
	}
}

test_binding_not_a_list if {
	errs := errors_for({"roles": {}, "bindings": {"bots": {"b": "admin"}}})
	errs == {"bindings.bots.b must be a list of role names"}
}

test_bad_admin_list if {
	errs := errors_for({"roles": {"r": {"groups": [], "clusters": [], "admin": "*"}}})
	errs == {`role "r": "admin" must be a list of action names`}
}

test_unknown_role_key if {
	errs := errors_for({"roles": {"r": {"groups": [], "clusters": [], "group": ["x"]}}})
	errs == {`role "r" has unknown key "group" (allowed: description, groups, clusters, clients, admin, adminClients)`}
}

test_role_clients_must_be_registered if {
	errors_for({"roles": {"r": {"groups": ["g"], "clusters": [{"name": "*"}], "clients": ["ghost"]}}, "clients": {"kubectl": {}}}) == {`role "r" names client "ghost", which data.limen.config.clients does not register`}
}

admin_role(ac) := {"r": {"groups": [], "clusters": [], "admin": ["user.lock"], "adminClients": ac}}

test_admin_clients_must_name_registered_applications if {
	reg := {"kubectl": {}, "console": {}, "ops-app": {}}
	errors_for({"roles": admin_role(["ops-app"]), "bindings": {}, "clients": reg}) == set()
	errors_for({"roles": admin_role("ops-app"), "bindings": {}, "clients": reg}) == {`role "r": "adminClients" must be a list of application names`}
	every c in ["*", "ghost", "kubectl", "console"] {
		errors_for({"roles": admin_role([c]), "bindings": {}, "clients": reg}) == {sprintf(`role "r": adminClients names %q, which is not a registered application (kubectl and console need no entry; "*" is not allowed)`, [c])}
	}
}

test_role_clients_must_be_strings if {
	errors_for({"roles": {"r": {"groups": ["g"], "clusters": [{"name": "*"}], "clients": "kubectl"}}, "clients": {"kubectl": {}}}) == {`role "r": "clients" must be a list of client names ("*" for every registered client)`}
}

test_clients_must_be_an_object if {
	errors_for({"roles": {}, "clients": ["kubectl"]}) == {"data.limen.config.clients must be an object mapping client names to their entries"}
}

test_bot_oidc_rules if {
	errors_for({"roles": {}, "bindings": {}, "bots": {"ci": {"oidc": [{"issuer": "github", "claims": {"repository": "a/b", "repository_owner_id": "42"}}]}}}) == set()
	errors_for({"roles": {}, "bindings": {}, "bots": {"ci": {"oidc": [{"issuer": "github", "claims": {}}]}}}) == {`bots.ci.oidc[0] needs a string "issuer" and a non-empty "claims" object of strings`}
	errors_for({"roles": {}, "bindings": {}, "bots": {"ci": {"oidc": [{"issuer": 1, "claims": {"a": "b"}}]}}}) == {`bots.ci.oidc[0] needs a string "issuer" and a non-empty "claims" object of strings`}
	errors_for({"roles": {}, "bindings": {}, "bots": {"ci": {"oidc": [{"issuer": "x", "claims": {"a": ["b"]}}]}}}) == {`bots.ci.oidc[0] needs a string "issuer" and a non-empty "claims" object of strings`}
	errors_for({"roles": {}, "bindings": {}, "bots": {"ci": {"keys": []}}}) == {`bots.ci has unknown key "keys" (allowed: oidc)`}
}

test_issuer_bindings_checked if {
	errs := errors_for({"roles": {}, "bindings": {"issuers": {
		"corp": {"users": {"a": ["ghost"], "b": "admin"}, "traits": {"groups": {"dev": ["ghost"]}}, "bots": {}},
		"Local": {},
		"local": {},
	}}})
	errs == {
		`bindings.issuers.corp.users.a names unknown role "ghost"`,
		`bindings.issuers.corp.users.b must be a list of role names`,
		`bindings.issuers.corp.traits.groups.dev names unknown role "ghost"`,
		`bindings.issuers.corp has unknown key "bots" (allowed: users, traits)`,
		`bindings.issuers.Local: "Local" is not an identity provider's name (1-63 lower-case letters, digits and inner hyphens; not local, bot, user or system...)`,
		`bindings.issuers.local: "local" is not an identity provider's name (1-63 lower-case letters, digits and inner hyphens; not local, bot, user or system...)`,
	}
}

# A keyless entry that binds no owner (only ref, or only the repository's
# name) admits any repository's CI token minted for this proxy's audience.
test_bot_oidc_entry_needs_an_owner_bound_claim if {
	msg := `bots.ci.oidc[0].claims binds no owner: add repository_owner_id or repository_id (GitHub), namespace_id or project_id (GitLab) or sub (another issuer); without one, any repository's token for this proxy's audience can match`
	errors_for({"roles": {}, "bindings": {}, "bots": {"ci": {"oidc": [{"issuer": "github", "claims": {"ref": "refs/heads/main"}}]}}}) == {msg}
	errors_for({"roles": {}, "bindings": {}, "bots": {"ci": {"oidc": [{"issuer": "github", "claims": {"repository": "a/b", "repository_owner_id": ""}}]}}}) == {msg}
	errors_for({"roles": {}, "bindings": {}, "bots": {"ci": {"oidc": [{"issuer": "gitlab", "claims": {"project_id": "7", "ref": "main"}}]}}}) == set()
}
