package policy

// Control-stream message types for the console's policy status page: the
// proxy sends TypeStatusQuery to its workers; each answers with
// TypeStatusReport, its Status.
const (
	TypeStatusQuery  = "policy.status"
	TypeStatusReport = "policy.status.report"
)
