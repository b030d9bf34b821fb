package limen.admin_test

import data.limen.admin
import data.limen.fixtures

allowed(principal, action) if {
	admin.allow with data.limen.config as fixtures.config
		with input as {"principal": principal, "action": action}
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
	admin.allow with data.limen.config as cfg with input as {"principal": auditor, "action": "session.observe"}
	admin.allow with data.limen.config as cfg with input as {"principal": auditor, "action": "audit.search"}
	not admin.allow with data.limen.config as cfg with input as {"principal": auditor, "action": "session.kill"}
	not admin.allow with data.limen.config as cfg with input as {"principal": auditor, "action": "user.lock"}
}
