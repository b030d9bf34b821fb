package limen.requests_test

import data.limen.fixtures
import data.limen.kube
import data.limen.requests
import data.limen.validate

config := object.union(fixtures.config, {
	"roles": object.union(fixtures.config.roles, {
		"edit-demo": {"groups": ["limen:edit"], "clusters": [{"name": "demo"}]},
		"break-glass": {"groups": ["limen:admin"], "clusters": [{"name": "*"}]},
	}),
	"requests": {
		"edit-demo": {
			"requesters": {"roles": ["view-demo"]},
			"approvers": {"roles": ["edit-dev"], "traits": {"groups": ["admins"]}},
			"maxDuration": "1h",
			"reasonRequired": true,
			"approvals": 1,
			"autoApproveUpTo": "5m",
		},
		"break-glass": {
			"requesters": {"traits": {"groups": ["dev"]}},
			"approvers": {"traits": {"groups": ["admins"]}},
			"maxDuration": "30m",
			"approvals": 2,
		},
	},
})

requestable_for(p, cluster) := r if {
	r := requests.requestable with data.limen.config as config
		with input as {"client": "kubectl", "principal": p, "cluster": cluster}
}

test_bob_may_request_edit_on_demo if {
	r := requestable_for(fixtures.bob, fixtures.demo)
	r == {"edit-demo": {"maxDuration": 3600000000000, "autoApproveUpTo": 300000000000, "reasonRequired": true, "approvals": 1}}
}

test_bob_may_request_nothing_on_prod if {
	requestable_for(fixtures.bob, fixtures.prod) == {}
}

test_trait_requester if {
	r := requestable_for(fixtures.alice, fixtures.prod)
	object.keys(r) == {"break-glass"}
	r["break-glass"].approvals == 2
	r["break-glass"].reasonRequired == false
}

test_application_credential_requests_nothing if {
	r := requests.requestable with data.limen.config as config
		with input as {"client": "coffee-menu", "principal": fixtures.bob, "cluster": fixtures.demo}
	r == {}
}

# The provider's bob is not the local bob: no bound role, no request.
test_provider_principal_of_same_name_requests_nothing if {
	p := {"kind": "user", "name": "bob", "issuer": "corp"}
	requestable_for(p, fixtures.demo) == {}
}

approve(approver, requester) := a if {
	a := requests.may_approve with data.limen.config as config
		with input as {"client": "kubectl", "principal": approver, "request": {"role": "edit-demo", "cluster": "demo", "requester": requester}}
}

test_approver_by_role if approve(fixtures.alice, fixtures.bob)

test_approver_by_trait if approve(fixtures.admin, fixtures.bob)

test_requester_never_approves if {
	# bob made approver by trait: still not for his own request.
	bob_admin := object.union(fixtures.bob, {"traits": {"groups": ["admins"]}})
	not approve(bob_admin, fixtures.bob)
}

test_non_approver_refused if {
	not approve({"kind": "user", "name": "carol"}, fixtures.bob)
}

test_application_credential_never_approves if {
	not requests.may_approve with data.limen.config as config
		with input as {"client": "coffee-menu", "principal": fixtures.alice, "request": {"role": "edit-demo", "cluster": "demo", "requester": fixtures.bob}}
}

test_provider_trait_does_not_approve if {
	p := {"kind": "user", "name": "dana", "issuer": "corp", "traits": {"groups": ["admins"]}}

	# corp's admins are bound to admin, not edit-dev; traits match local principals only.
	not approve(p, fixtures.bob)
}

groups_for(p, cluster, requested) := g if {
	g := kube.groups with data.limen.config as config
		with input as {"client": "kubectl", "principal": p, "cluster": cluster, "requested": requested}
}

test_approved_request_adds_groups if {
	groups_for(fixtures.bob, fixtures.demo, ["edit-demo"]) == {"limen:view", "limen:edit"}
}

test_without_request_view_only if {
	groups_for(fixtures.bob, fixtures.demo, []) == {"limen:view"}
}

# A request for a role the principal may not request grants nothing, so a
# worker whose policy no longer allows it drops the group.
test_request_not_requestable_grants_nothing if {
	groups_for(fixtures.bob, fixtures.demo, ["break-glass", "admin"]) == {"limen:view"}
}

test_request_for_other_cluster_grants_nothing if {
	groups_for(fixtures.bob, fixtures.prod, ["edit-demo"]) == set()
}

test_requested_role_does_not_administer if {
	not data.limen.admin.allow with data.limen.config as config
		with input as {"client": "kubectl", "principal": fixtures.bob, "action": "user.lock", "requested": ["admin"]}
}

errors_of(c) := e if {
	e := validate.errors with data.limen.config as c
}

test_config_valid if {
	errors_of(config) == set()
}

test_requestable_system_group_refused if {
	c := object.union(config, {"roles": object.union(config.roles, {"edit-demo": {"groups": ["system:masters"], "clusters": [{"name": "demo"}]}})})
	"requests.edit-demo: role \"edit-demo\" grants group system:masters, and a requestable role may never grant a \"system:\" group" in errors_of(c)
}

with_rule(rule) := object.union(object.remove(config, ["requests"]), {"requests": {"edit-demo": rule}})

base_rule := config.requests["edit-demo"]

test_bad_duration_refused if {
	"requests.edit-demo: \"maxDuration\" must be a positive duration such as \"1h\"" in errors_of(with_rule(object.union(base_rule, {"maxDuration": "an hour"})))
}

test_missing_duration_refused if {
	"requests.edit-demo: \"maxDuration\" must be a positive duration such as \"1h\"" in errors_of(with_rule(object.remove(base_rule, ["maxDuration"])))
}

test_auto_approve_longer_than_max_refused if {
	"requests.edit-demo: \"autoApproveUpTo\" must be a duration no longer than maxDuration" in errors_of(with_rule(object.union(base_rule, {"autoApproveUpTo": "2h"})))
}

test_zero_approvals_refused if {
	"requests.edit-demo: \"approvals\" must be a whole number from 1 to 10" in errors_of(with_rule(object.union(base_rule, {"approvals": 0})))
}

test_missing_approvers_refused if {
	"requests.edit-demo.approvers must name \"roles\" (a list of role names) or \"traits\" (trait name to a list of values), and nothing else" in errors_of(with_rule(object.remove(base_rule, ["approvers"])))
}

test_unknown_approver_role_refused if {
	"requests.edit-demo.approvers names unknown role \"nope\"" in errors_of(with_rule(object.union(base_rule, {"approvers": {"roles": ["nope"]}})))
}

test_unknown_key_refused if {
	"requests.edit-demo has unknown key \"aprovers\" (allowed: requesters, approvers, maxDuration, reasonRequired, approvals, autoApproveUpTo)" in errors_of(with_rule(object.union(base_rule, {"aprovers": {}})))
}

test_unknown_role_refused if {
	c := object.union(config, {"requests": {"nope": base_rule}})
	"requests.nope: no such role in data.limen.config.roles" in errors_of(c)
}
