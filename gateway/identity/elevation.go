package identity

import (
	"fmt"
	"time"
)

// Elevation is a role that an approved access request lends a principal on
// one cluster until Expires (docs/ACCESS-REQUESTS.md). The proxy writes it
// into the certificate it issues for the request and into each grant; the
// proxy re-checks the request in its store on every request, and both hops
// drop it once it has expired.
type Elevation struct {
	Request string    `json:"request"`
	Role    string    `json:"role"`
	Cluster string    `json:"cluster"`
	Expires time.Time `json:"expires"`
}

// MaxElevations bounds the requests one credential carries.
const MaxElevations = 16

// Validate checks an elevation's fields are well formed.
func (e Elevation) Validate() error {
	if err := ValidName(e.Request); err != nil {
		return fmt.Errorf("access request id: %w", err)
	}
	if err := ValidName(e.Role); err != nil {
		return fmt.Errorf("access request %s: role: %w", e.Request, err)
	}
	if err := ValidName(e.Cluster); err != nil {
		return fmt.Errorf("access request %s: cluster: %w", e.Request, err)
	}
	if e.Expires.IsZero() {
		return fmt.Errorf("access request %s: no expiry", e.Request)
	}
	return nil
}

// ActiveRoles returns the roles p's elevations lend it on cluster at now,
// in the order carried: an expired elevation lends nothing.
func (p Principal) ActiveRoles(cluster string, now time.Time) []string {
	var roles []string
	for _, e := range p.Requests {
		if e.Cluster == cluster && now.Before(e.Expires) {
			roles = append(roles, e.Role)
		}
	}
	return roles
}

// Elevated reports whether p carries any elevation active on cluster at now.
func (p Principal) Elevated(cluster string, now time.Time) bool {
	return len(p.ActiveRoles(cluster, now)) > 0
}

// WithoutRequests returns p without its elevations.
func (p Principal) WithoutRequests() Principal {
	p.Requests = nil
	return p
}
