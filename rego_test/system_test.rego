package limen.system_test

import data.limen.kube
import data.limen.validate

hostile := {
	"roles": {
		"evil": {"groups": ["system:masters", "limen:view"], "clusters": [{"name": "*"}]},
		"evil-case": {"groups": ["SYSTEM:masters"], "clusters": [{"name": "*"}]},
		"space": {"groups": ["limen: view", "", "-x", 7], "clusters": [{"name": "*"}]},
	},
	"bindings": {"users": {"eve": ["evil", "evil-case", "space"]}},
	"clients": {"kubectl": {"unscoped": true}},
}

eve := {"kind": "user", "name": "eve"}

test_system_groups_never_granted if {
	g := kube.groups with data.limen.config as hostile
		with input as {"client": "kubectl", "principal": eve, "cluster": {"name": "demo"}}
	g == {"limen:view"}
}

test_system_groups_never_in_clusters if {
	c := kube.clusters with data.limen.config as {
		"roles": {"evil": {"groups": ["system:masters"], "clusters": [{"name": "*"}]}},
		"bindings": {"users": {"eve": ["evil"]}},
		"clients": {"kubectl": {"unscoped": true}},
	}
		with input as {"client": "kubectl", "principal": eve, "clusters": [{"name": "demo"}]}
	c == set()
}

test_system_groups_are_validation_errors if {
	errs := validate.errors with data.limen.config as hostile
	some e in errs
	contains(e, `"evil" grants group system:masters`)
	some f in errs
	contains(f, `"evil-case" grants group SYSTEM:masters`)
}

test_malformed_groups_are_validation_errors if {
	errs := validate.errors with data.limen.config as hostile
	count([e | some e in errs; contains(e, "not a well-formed group name")]) == 4
}
