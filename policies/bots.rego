# METADATA
# title: Limen keyless bot logins
# description: |
#   oidc_login: whether a CI workload's verified ID token may log in as the
#   bot input.bot. input.issuer is the NAME of the proxy's --ci-issuer
#   NAME=URL whose checks the token passed, input.issuer_kind which CI
#   system that is (--ci-issuer-kind: github, gitlab or generic), and
#   input.claims the token's claims. data.limen.config.bots[NAME].oidc lists
#   the accepted tokens: each entry names an issuer and the claims that must
#   all be equal (for example repository_owner_id, repository and ref). An
#   entry with no claims matches nothing, so a typo never opens a bot to
#   every job of an issuer; nor does an entry that binds no owner.
package limen.bots

default oidc_login := false

# owner_claims are, per kind of CI issuer, the claims that pin a token to
# one owner: an immutable numeric id of the repository or of its owner
# (a name such as "acme/app" can be deleted and registered again by
# someone else), or, for another issuer, the subject it gives the
# workload. Without one, an entry that binds only ref admits any
# repository's token minted for this proxy's audience.
owner_claims := {
	"github": ["repository_owner_id", "repository_id"],
	"gitlab": ["namespace_id", "project_id"],
	"generic": ["sub"],
}

# owner_bound(rule, kind) holds when rule pins a non-empty owner-bound
# claim of kind.
owner_bound(rule, kind) if {
	some c in owner_claims[kind]
	is_string(rule.claims[c])
	rule.claims[c] != ""
}

oidc_login if {
	input.bot.kind == "bot"
	some rule in data.limen.config.bots[input.bot.name].oidc
	is_string(rule.issuer)
	rule.issuer == input.issuer
	count(rule.claims) > 0
	owner_bound(rule, input.issuer_kind)
	every claim, want in rule.claims {
		is_string(want)
		input.claims[claim] == want
	}
}
