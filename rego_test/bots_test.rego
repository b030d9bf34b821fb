package limen.bots_test

import data.limen.bots

config := {"bots": {
	"deployer": {"oidc": [
		{"issuer": "github", "claims": {"repository_owner_id": "42", "repository": "acme/app", "ref": "refs/heads/main"}},
		{"issuer": "gitlab", "claims": {}},
	]},
	# Entries bundle validation refuses, in case a bundle holds them anyway.
	"ref-only": {"oidc": [{"issuer": "github", "claims": {"ref": "refs/heads/main"}}]},
	"wrong-kind": {"oidc": [{"issuer": "github", "claims": {"project_id": "7", "ref": "refs/heads/main"}}]},
}}

kinds := {"github": "github", "gitlab": "gitlab", "evil": "github"}

login(name, issuer, claims) if {
	bots.oidc_login with data.limen.config as config
		with input as {"bot": {"kind": "bot", "name": name}, "issuer": issuer, "issuer_kind": kinds[issuer], "claims": claims}
}

main := {"repository_owner_id": "42", "repository": "acme/app", "ref": "refs/heads/main", "sub": "x"}

test_matching_claims if login("deployer", "github", main)

test_other_branch if not login("deployer", "github", object.union(main, {"ref": "refs/heads/feature"}))

test_other_repository if not login("deployer", "github", object.union(main, {"repository": "evil/app"}))

test_missing_claim if not login("deployer", "github", {"repository": "acme/app"})

test_other_issuer if not login("deployer", "evil", main)

test_other_bot if not login("other", "github", main)

test_empty_claims_match_nothing if not login("deployer", "gitlab", main)

test_user_kind_refused if {
	not bots.oidc_login with data.limen.config as config
		with input as {"bot": {"kind": "user", "name": "deployer"}, "issuer": "github", "claims": main}
}

test_claim_type_must_match if not login("deployer", "github", object.union(main, {"repository": ["acme/app"]}))

test_other_owner if not login("deployer", "github", object.union(main, {"repository_owner_id": "666"}))

test_ref_only_entry_matches_nothing if not login("ref-only", "github", main)

test_owner_claim_of_another_kind_matches_nothing if not login("wrong-kind", "github", object.union(main, {"project_id": "7"}))

test_unknown_issuer_kind if {
	not bots.oidc_login with data.limen.config as config
		with input as {"bot": {"kind": "bot", "name": "deployer"}, "issuer": "github", "issuer_kind": "jenkins", "claims": main}
}
