package limen.provenance_test

import data.limen.admin
import data.limen.fixtures

allowed(principal, action) if {
	admin.allow with data.limen.config as fixtures.config
		with input as {"principal": principal, "action": action, "client": "kubectl"}
}

# Administration follows provenance too: the local trait groups=admins
# makes a local user an administrator, never another source's user whose
# IdP group has the same name, unless that source's own entry binds it.
test_local_admin_trait_is_local if {
	allowed(fixtures.admin, "session.kill")
	not allowed(object.union(fixtures.admin, {"issuer": "other"}), "session.kill")
}

test_issuer_binds_its_own_admins if {
	allowed({"kind": "user", "name": "x", "issuer": "corp", "traits": {"groups": ["admins"]}}, "session.kill")
}

test_idp_carol_is_not_the_local_locker if {
	allowed({"kind": "user", "name": "carol"}, "user.lock")
	not allowed({"kind": "user", "name": "carol", "issuer": "corp"}, "user.lock")
}
