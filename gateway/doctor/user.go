package doctor

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/limenhq/limen/gateway/profile"
)

// Thresholds of the user's checks.
const (
	// CertWarnUnder is how little time a certificate may have left before
	// the user is told to log in again soon.
	CertWarnUnder = 15 * time.Minute
	// UserSkewWarn and UserSkewFail bound the skew between a user's machine
	// and the proxy. The proxy's CA backdates what it issues by a minute, so
	// past that a fresh certificate of the proxy's is not yet valid here,
	// and `limen kube credentials` hands kubectl a certificate the proxy
	// already holds expired (or refuses one it still accepts).
	UserSkewWarn = 30 * time.Second
	UserSkewFail = time.Minute
)

// UserOptions are what the user's checks look at.
type UserOptions struct {
	// Profile is the proxy's profile, that of the last login by default.
	Profile *profile.Profile
	// Kubeconfigs are the kubeconfig files to look in besides the ones in
	// the profile directory: those of KUBECONFIG, or ~/.kube/config.
	Kubeconfigs []string
	// Timeout bounds each network check (0: DefaultTimeout).
	Timeout time.Duration
	// Now is this machine's clock (nil: time.Now).
	Now func() time.Time
	// LookPath finds a command on PATH (nil: exec.LookPath).
	LookPath func(string) (string, error)
}

// User runs the user's checks: the proxy is reachable and trusted, the
// clocks agree, the user's certificate is valid, which clusters they may
// reach with a worker connected, and whether their kubeconfigs' limen
// plugin resolves.
func User(ctx context.Context, o UserOptions) Report {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	timeout := o.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	p := o.Profile
	var r Report
	anon, err := p.Client(nil)
	if err != nil {
		r = append(r, fail("proxy", "the proxy's CA stored at login is unusable: "+err.Error(), "run limen login --proxy "+p.Proxy+" --ca-fingerprint FINGERPRINT"))
		r = append(r, skip("clock", "not measured: no usable proxy CA"))
	} else {
		pr := probe(ctx, anon.HTTP, "https://"+p.Proxy+"/v1/", nil, timeout, now)
		r = append(r, proxyReachable(p, pr))
		r = append(r, Clock("clock", "the proxy", pr, UserSkewWarn, UserSkewFail,
			"certificates from the proxy look not yet valid or still valid here when they are not"))
	}
	creds, cert := certificate(p, now())
	r = append(r, cert)
	switch {
	case creds == nil:
		r = append(r, skip("clusters", "not listed: no valid certificate"))
	case r[0].Status == Fail:
		r = append(r, skip("clusters", "not listed: the proxy check failed"))
	default:
		r = append(r, clusters(ctx, p, creds, timeout)...)
	}
	return append(r, Kubeconfigs(append(ProfileKubeconfigs(p), o.Kubeconfigs...), o.LookPath)...)
}

// proxyReachable judges the probe of the proxy.
func proxyReachable(p *profile.Profile, pr Probe) Result {
	stored, _ := p.CAPEM()
	trust := "the system's trusted roots"
	if stored != nil {
		trust = "the proxy CA stored at login"
	}
	if pr.Err == nil {
		return ok("proxy", "%s reachable, its certificate trusted by %s", p.Proxy, trust)
	}
	pr.Addr = p.Proxy
	found, fix := connFailure("the proxy", pr, trust)
	switch untrusted := errors.As(pr.Err, new(x509.UnknownAuthorityError)); {
	case untrusted && stored != nil:
		fix = "if the proxy's CA was replaced, log in again with the new one: limen login --proxy " + p.Proxy +
			" --ca-fingerprint FINGERPRINT (limen proxy prints it); otherwise this is not your proxy"
	case untrusted:
		fix = "log in with the proxy's CA: limen login --proxy " + p.Proxy + " --ca-fingerprint FINGERPRINT (limen proxy prints it) or --ca-file"
	}
	return fail("proxy", found, fix)
}

// certificate loads the user's credentials and judges how long they have
// left.
func certificate(p *profile.Profile, now time.Time) (*profile.Credentials, Result) {
	login := "run limen login --proxy " + p.Proxy
	creds, err := p.Credentials(now)
	switch {
	case errors.Is(err, profile.ErrNotLoggedIn):
		return nil, fail("certificate", "not logged in to "+p.Proxy, login)
	case errors.Is(err, profile.ErrExpired):
		return nil, fail("certificate", "expired at "+stamp(creds.Cert.NotAfter), login)
	case err != nil:
		return nil, fail("certificate", "unusable", err.Error())
	}
	found := fmt.Sprintf("%s, valid until %s (%s left)", creds.Principal, stamp(creds.Cert.NotAfter), left(now, creds.Cert.NotAfter))
	if creds.Cert.NotAfter.Sub(now) < CertWarnUnder {
		return creds, warn("certificate", found+": less than "+CertWarnUnder.String(), login+" before it expires")
	}
	return creds, ok("certificate", "%s", found)
}

// clusters lists the clusters the user may reach, one line each, with
// whether a worker is connected for it. A cluster without a worker is a
// warning: the user's setup is fine, but requests to it get 503 until the
// operator brings the worker back.
func clusters(ctx context.Context, p *profile.Profile, creds *profile.Credentials, timeout time.Duration) []Result {
	c, err := p.Client(creds)
	if err != nil {
		return []Result{fail("clusters", "not listed: "+err.Error(), "run limen login --proxy "+p.Proxy)}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	list, err := c.Clusters(ctx)
	if err != nil {
		return []Result{fail("clusters", "the proxy did not list them: "+err.Error(), "run limen login --proxy "+p.Proxy+" and try again")}
	}
	if len(list) == 0 {
		return []Result{warn("clusters", "policy lets you reach no cluster", "ask the proxy's operator for access (limen policy eval shows what policy grants)")}
	}
	out := make([]Result, 0, len(list))
	for _, cl := range list {
		check := "cluster " + cl.Name
		if cl.Connected {
			out = append(out, ok(check, "you may reach it; a worker is connected"))
			continue
		}
		out = append(out, warn(check, "you may reach it, but no worker is connected: requests get 503",
			"ask the operator to check the cluster's worker (limen doctor worker on its host)"))
	}
	return out
}
