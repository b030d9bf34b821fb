package limen.kube_test

import data.limen.fixtures
import data.limen.kube

groups_for(principal, cluster) := g if {
	g := kube.groups with data.limen.config as fixtures.config
		with input as {"client": "kubectl", "principal": principal, "cluster": cluster}
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
		with input as {"client": "kubectl", "principal": fixtures.alice}
}

test_admin_trait_edit_everywhere if {
	groups_for(fixtures.admin, fixtures.prod) == {"limen:edit"}
}

test_grants_explain_roles if {
	g := kube.grants with data.limen.config as fixtures.config
		with input as {"client": "kubectl", "principal": fixtures.alice, "cluster": fixtures.demo}
	g == {"edit-dev": {"limen:edit"}, "view-everywhere": {"limen:view"}}
}

test_clusters_lists_reachable if {
	c := kube.clusters with data.limen.config as fixtures.config
		with input as {"client": "kubectl", "principal": fixtures.bob, "clusters": [fixtures.demo, fixtures.prod, fixtures.prod_eu]}
	c == {"demo"}
}

test_clusters_for_trait if {
	p := {"kind": "user", "name": "x", "traits": {"groups": ["eu-oncall"]}}
	c := kube.clusters with data.limen.config as fixtures.config
		with input as {"client": "kubectl", "principal": p, "clusters": [fixtures.demo, fixtures.prod, fixtures.prod_eu]}
	c == {"prod-eu"}
}

test_no_data_grants_nothing if {
	kube.groups == set() with input as {"client": "kubectl", "principal": fixtures.alice, "cluster": fixtures.demo}
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
				with input as {"client": "kubectl", "principal": p, "cluster": c}
			groups_for(p, c) == {x | some gs in g; some x in gs}
		}
	}
}

groups_through(client, principal, cluster) := g if {
	g := kube.groups with data.limen.config as fixtures.config
		with input as {"client": client, "principal": principal, "cluster": cluster}
}

barista := {"kind": "user", "name": "erin", "traits": {"groups": ["baristas"]}}

test_role_without_clients_serves_kubectl_only if {
	groups_through("kubectl", barista, fixtures.demo) == {"limen:view", "limen:any-view"}
	groups_through("console", barista, fixtures.demo) == {"limen:console-view", "limen:any-view"}
	groups_through("coffee-menu", barista, fixtures.prod) == {"limen:menu-edit"}
}

test_unregistered_missing_or_malformed_client_gets_nothing if {
	every client in ["", "kubectl2", "Kubectl", "kubectl,console", ["kubectl"], 1, null] {
		groups_through(client, barista, fixtures.demo) == set()
	}
	kube.groups == set() with data.limen.config as fixtures.config
		with input as {"principal": barista, "cluster": fixtures.demo}
}

test_unregistered_client_reaches_no_cluster if {
	kube.clusters == set() with data.limen.config as fixtures.config
		with input as {"client": "nobody", "principal": fixtures.alice, "clusters": [fixtures.demo, fixtures.prod]}
}

test_data_without_clients_grants_nothing if {
	cfg := object.remove(fixtures.config, ["clients"])
	kube.groups == set() with data.limen.config as cfg
		with input as {"client": "kubectl", "principal": fixtures.alice, "cluster": fixtures.demo}
}

# Provenance (DESIGN.md §2): an identity provider's user named bob is not the
# local bob, and a local user named after an IdP person is not that person.
idp_bob := {"kind": "user", "name": "bob", "issuer": "corp"}

test_idp_user_does_not_get_local_user_bindings if {
	groups_for(idp_bob, fixtures.demo) == set()
}

test_idp_user_does_not_get_local_trait_bindings if {
	groups_for({"kind": "user", "name": "x", "issuer": "corp", "traits": {"groups": ["baristas"]}}, fixtures.demo) == set()
}

test_idp_user_binds_through_its_issuer_by_name if {
	groups_for({"kind": "user", "name": "frank@example.com", "issuer": "corp"}, fixtures.demo) == {"limen:view"}
}

test_idp_user_binds_through_its_issuer_by_trait if {
	groups_for({"kind": "user", "name": "x", "issuer": "corp", "traits": {"groups": ["dev"]}}, fixtures.demo) == {"limen:edit"}
}

test_local_user_named_like_idp_person_is_not_that_person if {
	groups_for({"kind": "user", "name": "frank@example.com"}, fixtures.demo) == set()
	groups_for({"kind": "user", "name": "frank@example.com", "issuer": ""}, fixtures.demo) == set()
}

test_other_issuer_does_not_get_corp_bindings if {
	groups_for({"kind": "user", "name": "frank@example.com", "issuer": "other"}, fixtures.demo) == set()
}

test_local_user_with_explicit_empty_issuer_keeps_bindings if {
	groups_for(object.union(fixtures.bob, {"issuer": ""}), fixtures.demo) == {"limen:view"}
}

test_bot_with_issuer_gets_nothing if {
	groups_for({"kind": "bot", "name": "ci-deployer", "issuer": "corp"}, fixtures.demo) == set()
}
