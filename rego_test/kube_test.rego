package limen.kube_test

import data.limen.fixtures
import data.limen.kube

groups_for(principal, cluster) := g if {
	g := kube.groups with data.limen.config as fixtures.config
		with input as {"principal": principal, "cluster": cluster}
}

test_trait_grants_edit_on_labelled_cluster if {
	groups_for(fixtures.alice, fixtures.demo) == {"limen:edit", "limen:view"}
}

test_trait_grants_view_only_elsewhere if {
	groups_for(fixtures.alice, fixtures.prod) == {"limen:view"}
}

test_user_by_name if {
	groups_for(fixtures.bob, fixtures.demo) == {"limen:view"}
}

test_user_by_name_other_cluster_denied if {
	groups_for(fixtures.bob, fixtures.prod) == set()
}

test_bot_by_name if {
	groups_for(fixtures.bot, fixtures.demo) == {"limen:edit"}
}

test_bot_binding_does_not_apply_to_user_of_same_name if {
	groups_for({"kind": "user", "name": "ci-deployer"}, fixtures.demo) == set()
}

test_user_binding_does_not_apply_to_bot_of_same_name if {
	groups_for({"kind": "bot", "name": "bob"}, fixtures.demo) == set()
}

test_label_selector_needs_every_label if {
	p := {"kind": "user", "name": "x", "traits": {"groups": ["eu-oncall"]}}
	groups_for(p, fixtures.prod_eu) == {"limen:edit"}
	groups_for(p, fixtures.prod) == set()
}

test_label_selector_on_unlabelled_cluster if {
	p := {"kind": "user", "name": "x", "traits": {"groups": ["eu-oncall"]}}
	groups_for(p, {"name": "prod-eu"}) == set()
}

test_name_and_labels_must_both_match if {
	p := {"kind": "user", "name": "erin"}
	groups_for(p, {"name": "prod", "labels": {"tier": "gold"}}) == {"team:x"}
	groups_for(p, {"name": "prod", "labels": {"tier": "silver"}}) == set()
	groups_for(p, {"name": "other", "labels": {"tier": "gold"}}) == set()
}

test_unknown_principal_denied if {
	groups_for({"kind": "user", "name": "mallory"}, fixtures.demo) == set()
}

test_unknown_trait_value_denied if {
	groups_for({"kind": "user", "name": "m", "traits": {"groups": ["devs", "Dev"]}}, fixtures.demo) == set()
}

test_trait_value_under_other_trait_name_denied if {
	groups_for({"kind": "user", "name": "m", "traits": {"teams": ["dev"]}}, fixtures.demo) == set()
}

test_missing_cluster_denied if {
	kube.groups == set() with data.limen.config as fixtures.config
		with input as {"principal": fixtures.alice}
}

test_admin_trait_edit_everywhere if {
	groups_for(fixtures.admin, fixtures.prod) == {"limen:edit"}
}

test_grants_explain_roles if {
	g := kube.grants with data.limen.config as fixtures.config
		with input as {"principal": fixtures.alice, "cluster": fixtures.demo}
	g == {"edit-dev": {"limen:edit"}, "view-everywhere": {"limen:view"}}
}

test_clusters_lists_reachable if {
	c := kube.clusters with data.limen.config as fixtures.config
		with input as {"principal": fixtures.bob, "clusters": [fixtures.demo, fixtures.prod, fixtures.prod_eu]}
	c == {"demo"}
}

test_clusters_for_trait if {
	p := {"kind": "user", "name": "x", "traits": {"groups": ["eu-oncall"]}}
	c := kube.clusters with data.limen.config as fixtures.config
		with input as {"principal": p, "clusters": [fixtures.demo, fixtures.prod, fixtures.prod_eu]}
	c == {"prod-eu"}
}

test_no_data_grants_nothing if {
	kube.groups == set() with input as {"principal": fixtures.alice, "cluster": fixtures.demo}
}

# groups inlines the selector logic for speed; it must agree with grants,
# which uses roles.selects.
test_groups_agrees_with_grants if {
	principals := [
		fixtures.alice, fixtures.bob, fixtures.bot, fixtures.admin,
		{"kind": "user", "name": "erin"},
		{"kind": "user", "name": "x", "traits": {"groups": ["eu-oncall", "dev"]}},
	]
	clusters := [
		fixtures.demo, fixtures.prod, fixtures.prod_eu, {"name": "prod"},
		{"name": "prod", "labels": {"tier": "gold"}},
	]
	every p in principals {
		every c in clusters {
			g := kube.grants with data.limen.config as fixtures.config
				with input as {"principal": p, "cluster": c}
			groups_for(p, c) == {x | some gs in g; some x in gs}
		}
	}
}
