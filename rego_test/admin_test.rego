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
