# METADATA
# title: Limen administrative decisions
# description: |
#   allow: whether input.principal may perform input.action (for example
#   "session.kill" or "user.lock"). A role's "admin" list names the actions
#   it permits; "*" permits every action.
#
#   The web console (gateway/console) asks about these actions:
#     console.sessions, console.recordings, console.access: open the
#       Sessions, Recordings and "what may I do" pages, which show the
#       caller's own sessions and recordings; every user may (self_service).
#     sessions.list, recordings.list: see everyone's sessions, recordings.
#     session.kill, session.observe (the live view), audit.search,
#     locks.list, user.lock, user.unlock, policy.status.
package limen.admin

import data.limen.roles

default allow := false

allow if {
	some role in roles.bound
	some action in data.limen.config.roles[role].admin
	action in {"*", input.action}
}

# self_service are the console pages every user may open: each shows only
# the caller's own sessions and recordings, or what the caller may do.
self_service := {"console.sessions", "console.recordings", "console.access"}

allow if {
	input.principal.kind == "user"
	input.action in self_service
}
