# METADATA
# title: Shared test fixtures
package limen.fixtures

config := {
	"roles": {
		"view-everywhere": {"groups": ["limen:view"], "clusters": [{"name": "*"}]},
		"edit-dev": {"groups": ["limen:edit"], "clusters": [{"labels": {"env": "dev"}}]},
		"edit-eu-prod": {"groups": ["limen:edit"], "clusters": [{"labels": {"env": "prod", "region": "eu"}}]},
		"view-demo": {"groups": ["limen:view"], "clusters": [{"name": "demo"}]},
		"deploy-demo": {"groups": ["limen:edit"], "clusters": [{"name": "demo"}]},
		"named-and-labelled": {"groups": ["team:x"], "clusters": [{"name": "prod", "labels": {"tier": "gold"}}]},
		"admin": {"groups": ["limen:edit"], "clusters": [{"name": "*"}], "admin": ["*"]},
		"locker": {"groups": [], "clusters": [], "admin": ["user.lock"]},
		"menu-editor": {"groups": ["limen:menu-edit"], "clusters": [{"name": "*"}], "clients": ["coffee-menu"]},
		"console-view": {"groups": ["limen:console-view"], "clusters": [{"name": "demo"}], "clients": ["console"]},
		"view-any-client": {"groups": ["limen:any-view"], "clusters": [{"name": "demo"}], "clients": ["*"]},
	},
	"clients": {
		"kubectl": {"unscoped": true},
		"console": {"userPrefix": "console:"},
		"coffee-menu": {"scope": []},
	},
	"bindings": {
		"users": {"bob": ["view-demo"], "carol": ["locker"], "erin": ["named-and-labelled"]},
		"bots": {"ci-deployer": ["deploy-demo"]},
		"traits": {"groups": {
			"dev": ["edit-dev", "view-everywhere"],
			"admins": ["admin"],
			"eu-oncall": ["edit-eu-prod"],
			"baristas": ["menu-editor", "console-view", "view-any-client", "view-demo"],
		}},
		"issuers": {"corp": {
			"users": {"frank@example.com": ["view-demo"]},
			"traits": {"groups": {"dev": ["edit-dev"], "admins": ["admin"]}},
		}},
	},
}

demo := {"name": "demo", "labels": {"env": "dev"}}

prod := {"name": "prod", "labels": {"env": "prod", "region": "us"}}

prod_eu := {"name": "prod-eu", "labels": {"env": "prod", "region": "eu"}}

alice := {"kind": "user", "name": "alice", "traits": {"groups": ["dev"]}}

bob := {"kind": "user", "name": "bob"}

bot := {"kind": "bot", "name": "ci-deployer"}

admin := {"kind": "user", "name": "dana", "traits": {"groups": ["admins"]}}
