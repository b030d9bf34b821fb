package limen.admin_test

import data.limen.admin
import data.limen.fixtures

allowed(principal, action) if allowed_via(principal, "kubectl", action)

allowed_via(principal, client, action) if {
	admin.allow with data.limen.config as fixtures.config
		with input as {"principal": principal, "client": client, "action": action}
}

test_admin_trait_allows_everything if {
	allowed(fixtures.admin, "session.kill")
	allowed(fixtures.admin, "user.lock")
}

test_action_list if {
	carol := {"kind": "user", "name": "carol"}
	allowed(carol, "user.lock")
	not allowed(carol, "session.kill")
}

test_non_admins_denied if {
	not allowed(fixtures.alice, "user.lock")
	not allowed(fixtures.bob, "user.lock")
	not allowed(fixtures.bot, "session.kill")
}

test_default_false if {
	admin.allow == false with input as {"principal": fixtures.admin, "action": "x"}
}

test_console_self_service_for_every_user if {
	allowed(fixtures.bob, "console.sessions")
	allowed(fixtures.bob, "console.recordings")
	allowed(fixtures.bob, "console.access")
}

test_console_self_service_not_for_bots if {
	not allowed(fixtures.bot, "console.sessions")
	not allowed(fixtures.bot, "console.recordings")
}

test_console_all_seeing_actions_need_a_role if {
	every action in {"sessions.list", "recordings.list", "session.observe", "audit.search", "locks.list", "policy.status", "session.kill"} {
		not allowed(fixtures.bob, action)
		allowed(fixtures.admin, action)
	}
}

test_console_auditor_role if {
	auditor := {"kind": "user", "name": "ann"}
	cfg := object.union(fixtures.config, {
		"roles": object.union(fixtures.config.roles, {"auditor": {"groups": [], "clusters": [], "admin": ["session.observe", "audit.search", "recordings.list", "sessions.list"]}}),
		"bindings": object.union(fixtures.config.bindings, {"users": object.union(fixtures.config.bindings.users, {"ann": ["auditor"]})}),
	})
	admin.allow with data.limen.config as cfg with input as {"principal": auditor, "client": "console", "action": "session.observe"}
	admin.allow with data.limen.config as cfg with input as {"principal": auditor, "client": "console", "action": "audit.search"}
	not admin.allow with data.limen.config as cfg with input as {"principal": auditor, "client": "console", "action": "session.kill"}
	not admin.allow with data.limen.config as cfg with input as {"principal": auditor, "client": "console", "action": "user.lock"}
}

test_console_and_kubectl_administer if {
	allowed_via(fixtures.admin, "kubectl", "session.kill")
	allowed_via(fixtures.admin, "console", "session.kill")
}

# An administrator's credential bound to an application is no
# administrator: not for "*", not for one listed action, not for the
# console's own-data pages, and not without a client at all.
test_application_credential_never_administers if {
	carol := {"kind": "user", "name": "carol"}
	every client in {"coffee-menu", "", "Kubectl", "kubectl,console"} {
		not allowed_via(fixtures.admin, client, "session.kill")
		not allowed_via(fixtures.admin, client, "tokens.create")
		not allowed_via(carol, client, "user.lock")
		not allowed_via(fixtures.bob, client, "console.sessions")
	}
	not admin.allow with data.limen.config as fixtures.config
		with input as {"principal": fixtures.admin, "action": "session.kill"}
}

# A role may let a registered application administer, by name only.
test_admin_clients_by_name if {
	cfg := object.union(fixtures.config, {
		"clients": object.union(object.get(fixtures.config, "clients", {}), {"ops-app": {"scope": []}}),
		"roles": object.union(fixtures.config.roles, {"ops": {"groups": [], "clusters": [], "admin": ["user.lock"], "adminClients": ["ops-app"]}}),
		"bindings": object.union(fixtures.config.bindings, {"users": object.union(fixtures.config.bindings.users, {"olga": ["ops"]})}),
	})
	olga := {"kind": "user", "name": "olga"}
	admin.allow with data.limen.config as cfg with input as {"principal": olga, "client": "ops-app", "action": "user.lock"}
	not admin.allow with data.limen.config as cfg with input as {"principal": olga, "client": "ops-app", "action": "session.kill"}
	not admin.allow with data.limen.config as cfg with input as {"principal": olga, "client": "coffee-menu", "action": "user.lock"}

	# The admin role, bound to the same person, still does not reach the app.
	not admin.allow with data.limen.config as cfg with input as {"principal": fixtures.admin, "client": "ops-app", "action": "session.kill"}
}
