# METADATA
# title: Limen administrative decisions
# description: |
#   allow: whether input.principal may perform input.action (for example
#   "session.kill" or "user.lock"). A role's "admin" list names the actions
#   it permits; "*" permits every action.
package limen.admin

import data.limen.roles

default allow := false

allow if {
	some role in roles.bound
	some action in data.limen.config.roles[role].admin
	action in {"*", input.action}
}
