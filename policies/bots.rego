# METADATA
# title: Limen keyless bot logins
# description: |
#   oidc_login: whether a CI workload's verified ID token may log in as the
#   bot input.bot. input.issuer is the NAME of the proxy's --ci-issuer
#   NAME=URL whose checks the token passed, and input.claims its claims.
#   data.limen.config.bots[NAME].oidc lists the accepted tokens: each entry
#   names an issuer and the claims that must all be equal (for example
#   repository and ref). An entry with no claims matches nothing, so a
#   typo never opens a bot to every job of an issuer.
package limen.bots

default oidc_login := false

oidc_login if {
	input.bot.kind == "bot"
	some rule in data.limen.config.bots[input.bot.name].oidc
	is_string(rule.issuer)
	rule.issuer == input.issuer
	count(rule.claims) > 0
	every claim, want in rule.claims {
		is_string(want)
		input.claims[claim] == want
	}
}
