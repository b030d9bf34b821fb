# METADATA
# title: Limen administrative decisions
# description: |
#   allow: whether input.principal, through a credential of input.client,
#   may perform input.action (for example "session.kill" or "user.lock"). A
#   role's "admin" list names the actions it permits; "*" permits every
#   action. Only Limen's own clients (kubectl, console) administer, unless a
#   role names an application in "adminClients": a certificate an
#   administrator trades for an application is not an administrator.
#
#   The web console (gateway/console) asks about these actions:
#     console.sessions, console.recordings, console.access: open the
#       Sessions, Recordings and "what may I do" pages, which show the
#       caller's own sessions and recordings; every user may (self_service).
#     console.requests: open the Requests page, which shows the caller's
#       access requests and those policy lets the caller decide
#       (requests.rego decides who approves, not this); every user may.
#     sessions.list, recordings.list: see everyone's sessions, recordings.
#     session.kill, session.observe (the live view), audit.search,
#     locks.list, user.lock, user.unlock, policy.status.
package limen.admin

import data.limen.roles

default allow := false

allow if {
	some role in roles.bound
	administers(role, input.client)
	some action in data.limen.config.roles[role].admin
	action in {"*", input.action}
}

# first_party are Limen's own clients: the command line and the console.
first_party := {"kubectl", "console"}

# administers(role, client) holds when credentials of client may use the
# role's admin actions: Limen's own clients always; an application only
# when the role lists it in "adminClients" (by name: no "*", so that a
# new application never administers by accident) and the policy registers
# it. Code running in a browser application holds a person's credential;
# by default it can do only what its application is for.
administers(_, client) if client in first_party

administers(role, client) if {
	some c in object.get(data.limen.config.roles[role], "adminClients", [])
	c == client
	roles.registered(client)
}

# self_service are the console pages every user may open: each shows only
# the caller's own sessions and recordings, or what the caller may do.
self_service := {"console.sessions", "console.recordings", "console.access", "console.requests"}

allow if {
	input.principal.kind == "user"
	input.client in first_party
	input.action in self_service
}
