package doctor

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/limenhq/limen/gateway/worker"
)

// TokenWarnUnder is how little time a token without an issue time may have
// left before it warns. A token with one warns once less than a fifth of
// its life is left: the kubelet replaces a projected token at 80% of it.
const TokenWarnUnder = 10 * time.Minute

// Token reads the worker's ServiceAccount token, as the worker does, and
// judges its expiry from its exp claim, read without verifying the
// signature (the API server check proves the token is accepted).
func Token(path string, now time.Time) (string, Result) {
	tok, err := (&worker.TokenFile{Path: path}).Token()
	if err != nil {
		return "", fail("token", err.Error()+": the worker answers every request with 503",
			"mount the ServiceAccount token there (deploy/kube), or pass --kube-token-file")
	}
	claims, err := jwtClaims(tok)
	if err != nil {
		return tok, warn("token", fmt.Sprintf("%s holds no readable JWT (%v): its expiry is unknown", path, err),
			"use a ServiceAccount token (a projected volume, or kubectl create token)")
	}
	who := "ServiceAccount token"
	if claims.Sub != "" {
		who += " of " + claims.Sub
	}
	if claims.Exp == 0 {
		return tok, ok("token", "%s in %s, with no expiry", who, path)
	}
	exp := time.Unix(claims.Exp, 0)
	fix := "the kubelet replaces a projected token before it expires: check the worker pod's token volume, or replace " + path
	if !now.Before(exp) {
		return tok, fail("token", fmt.Sprintf("%s in %s expired at %s: the API server refuses it", who, path, stamp(exp)), fix)
	}
	found := fmt.Sprintf("%s in %s, expires %s (%s left)", who, path, stamp(exp), left(now, exp))
	rest := exp.Sub(now)
	late := rest < TokenWarnUnder
	if claims.Iat != 0 {
		late = rest < exp.Sub(time.Unix(claims.Iat, 0))/5
	}
	if late {
		return tok, warn("token", found+": it should have been replaced by now", fix)
	}
	return tok, ok("token", "%s", found)
}

// claims are the JWT claims the token check reads.
type claims struct {
	Sub      string `json:"sub"`
	Exp, Iat int64
}

// jwtClaims decodes the payload of a JWT without verifying it.
func jwtClaims(tok string) (claims, error) {
	var c claims
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return c, fmt.Errorf("want three dot-separated parts, got %d", len(parts))
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return c, fmt.Errorf("payload: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("payload: %w", err)
	}
	return c, nil
}

// APIServer asks the API server's /readyz with the worker's transport and
// token (when it has one): it is reachable, trusted by the worker's CA
// file, accepts the token (a refused token is a 401 on any path) and is
// ready.
func APIServer(ctx context.Context, server, caFile, token string, timeout time.Duration, now func() time.Time) Result {
	u, rt, err := worker.Upstream(server, caFile)
	if err != nil {
		return fail("api server", err.Error(), "pass the worker's --kube-api-server and --kube-ca-file")
	}
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	pr := probe(ctx, &http.Client{Transport: rt}, u.String()+"/readyz", h, timeout, now)
	if pr.Err != nil {
		pr.Addr = u.String()
		found, fix := connFailure("the API server", pr, "--kube-ca-file "+caFile)
		return fail("api server", found, fix)
	}
	switch {
	case pr.Status == http.StatusUnauthorized:
		return fail("api server", fmt.Sprintf("%s refused the worker's token (401): it is expired, revoked or not for this cluster", u),
			"give the worker a current ServiceAccount token of this cluster (--kube-token-file)")
	case pr.Status != http.StatusOK:
		return fail("api server", fmt.Sprintf("%s is not ready (%d): %s", u, pr.Status, firstLine(pr.Body)),
			"see the API server's /readyz?verbose and its logs")
	case token == "":
		return warn("api server", fmt.Sprintf("%s is reachable and ready; the token was not tried (unreadable)", u),
			"fix the token (see above)")
	}
	return ok("api server", "%s is reachable, trusted, ready, and accepts the worker's token", u)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
