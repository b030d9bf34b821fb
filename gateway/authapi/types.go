package authapi

import (
	"time"

	"github.com/limenhq/limen/gateway/enroll"
	"github.com/limenhq/limen/gateway/identity"
)

// Paths the handler serves, all under /v1/.
const (
	PathLogin    = "/v1/login"
	PathWhoAmI   = "/v1/whoami"
	PathClusters = "/v1/clusters"
	PathUsers    = "/v1/admin/users"
	PathTokens   = "/v1/admin/tokens"
	PathEnroll   = enroll.Path
)

// Admin actions passed to Admin.AdminAllow (data.limen.admin.allow).
const (
	ActionUsersList    = "users.list"
	ActionUsersAdd     = "users.add"
	ActionUsersRemove  = "users.remove"
	ActionUsersPasswd  = "users.passwd"
	ActionTokensCreate = "tokens.create"
	ActionTokensList   = "tokens.list"
)

// LoginRequest is posted to PathLogin.
type LoginRequest struct {
	User     string `json:"user"`
	Password string `json:"password"`
	// CSR is a PEM certificate request for the key the client made; the
	// private key never leaves the client.
	CSR string `json:"csr"`
	// TTL optionally asks for a shorter certificate ("1h"); the proxy's
	// configured TTL is the ceiling.
	TTL string `json:"ttl,omitempty"`
}

// LoginResponse carries the short-lived certificate.
type LoginResponse struct {
	Certificate string             `json:"certificate"` // PEM, leaf only
	CA          string             `json:"ca"`          // PEM root CA
	Principal   identity.Principal `json:"principal"`
	Expires     time.Time          `json:"expires"`
}

// WhoAmIResponse describes the caller's certificate.
type WhoAmIResponse struct {
	Principal identity.Principal `json:"principal"`
	Expires   time.Time          `json:"expires"`
}

// Cluster is one cluster the caller may reach.
type Cluster struct {
	Name string `json:"name"`
	// Connected says whether a worker for the cluster is connected now.
	Connected bool `json:"connected"`
}

// ClustersResponse lists the clusters policy lets the caller reach.
type ClustersResponse struct {
	Clusters []Cluster `json:"clusters"`
}

// UserRequest creates a local user.
type UserRequest struct {
	Name     string              `json:"name"`
	Password string              `json:"password"`
	Traits   map[string][]string `json:"traits,omitempty"`
}

// PasswordRequest replaces a local user's password.
type PasswordRequest struct {
	Password string `json:"password"`
}

// TokenRequest creates a join token.
type TokenRequest struct {
	Cluster string `json:"cluster"`
	TTL     string `json:"ttl,omitempty"`
}

// TokenResponse carries a new join token; it is shown once.
type TokenResponse struct {
	Token string           `json:"token"`
	Info  enroll.TokenInfo `json:"info"`
}
