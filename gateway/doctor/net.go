package doctor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	neturl "net/url"
	"strings"
	"time"
)

// DefaultTimeout bounds each network check.
const DefaultTimeout = 10 * time.Second

// Probe is one HTTPS request to a server: whether it was reached and its
// certificate trusted (Err), and its clock (Date) against this machine's
// clock at Sent and Received.
type Probe struct {
	// Addr is the server's HOST:PORT or URL, for messages.
	Addr string
	// Status is the response's status code.
	Status int
	// Body is the start of the response body.
	Body string
	Err  error
	// Sent and Received are this machine's clock around the request.
	Sent, Received time.Time
	// Date is the response's Date header, zero when it had none.
	Date time.Time
}

// probe sends GET url with client, bounded by timeout, without following
// redirects. Any answer at all proves the connection and the TLS handshake.
func probe(ctx context.Context, client *http.Client, url string, header http.Header, timeout time.Duration, now func() time.Time) Probe {
	c := *client
	c.Timeout = 0
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	defer c.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	p := Probe{Addr: url}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		p.Err = err
		return p
	}
	for k, v := range header {
		req.Header[k] = v
	}
	p.Sent = now()
	resp, err := c.Do(req)
	p.Received = now()
	if err != nil {
		// The *url.Error repeats the method and URL the messages give.
		var ue *neturl.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if tr, ok := c.Transport.(*http.Transport); ok && tr.TLSClientConfig != nil && len(tr.TLSClientConfig.Certificates) > 0 && cutOff(err) {
			if alert := peerAlert(ctx, req.URL.Host, tr.TLSClientConfig); alert != nil {
				err = alert
			}
		}
		p.Err = err
		return p
	}
	defer resp.Body.Close()
	p.Status = resp.StatusCode
	buf := make([]byte, 512)
	n, _ := resp.Body.Read(buf)
	p.Body = strings.TrimSpace(string(buf[:n]))
	if d, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
		p.Date = d
	}
	return p
}

// cutOff reports whether err may be a connection the peer closed after the
// handshake: not a dial failure, a timeout, or our refusal of its
// certificate. (HTTP/1.1 and HTTP/2 word that closing in many ways: a
// broken pipe, a reset, EOF, "client conn could not be established".)
func cutOff(err error) bool {
	var (
		op     *net.OpError
		verify *tls.CertificateVerificationError
	)
	dial := errors.As(err, &op) && op.Op == "dial"
	return !dial && !errors.As(err, &verify) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)
}

// peerAlert redials addr with cfg and returns the alert a TLS 1.3 server
// sends right after the handshake when it refuses our certificate, if it
// sends one. The HTTP request that races that alert may see only a broken
// pipe or a reset, which would not say why.
func peerAlert(ctx context.Context, addr string, cfg *tls.Config) error {
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"http/1.1"}
	if cfg.ServerName == "" {
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
	}
	d := tls.Dialer{Config: cfg}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetReadDeadline(dl)
	}
	_, err = conn.Read(make([]byte, 1))
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" {
		return err
	}
	return nil
}

// connFailure words why a probe got no answer, and what to do: the server
// unreachable, its certificate untrusted, for another name, expired, or our
// certificate refused. who names the server ("the proxy"); trust says
// what its certificate was checked against.
func connFailure(who string, p Probe, trust string) (found, fix string) {
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		op       *net.OpError
	)
	err := p.Err
	switch {
	case errors.As(err, &unknown):
		return fmt.Sprintf("%s at %s is reachable but its certificate is not trusted: not signed by %s", who, p.Addr, trust),
			"if its CA was replaced, get the new one from its operator; otherwise you are not talking to " + who
	case errors.As(err, &hostname):
		names := hostname.Certificate.DNSNames
		for _, ip := range hostname.Certificate.IPAddresses {
			names = append(names, ip.String())
		}
		return fmt.Sprintf("%s at %s is reachable but its certificate is for another name: it names %s, not %s", who, p.Addr,
				strings.Join(names, ", "), hostname.Host),
			"use the address its certificate names, or have its operator add this one to its certificate"
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return fmt.Sprintf("%s at %s is reachable but its certificate is expired or not yet valid by this machine's clock (%v)", who, p.Addr, err),
			"check this machine's clock; if it is right, " + who + "'s certificate must be renewed"
	case errors.As(err, &invalid):
		return fmt.Sprintf("%s at %s is reachable but its certificate is not valid (%v)", who, p.Addr, err),
			"its operator must replace its certificate"
	case errors.As(err, &op) && op.Op == "remote error":
		return fmt.Sprintf("%s at %s refused our certificate (%v)", who, p.Addr, op.Err),
			"the certificate presented is expired, revoked or from another CA: renew it"
	case errors.As(err, &op) && op.Op == "dial", errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("%s at %s is unreachable (%v)", who, p.Addr, err),
			"check the address, the network and firewalls between here and there, and that " + who + " is running"
	}
	return fmt.Sprintf("no answer from %s at %s (%v)", who, p.Addr, err),
		"check the address and that " + who + " is running and speaks HTTPS there"
}

// Skew is how far a server's clock is ahead of this machine's (negative:
// behind), and the uncertainty of that figure: half the round trip plus
// the Date header's one-second resolution.
func (p Probe) Skew() (skew, uncertainty time.Duration, ok bool) {
	if p.Err != nil || p.Date.IsZero() || p.Sent.IsZero() {
		return 0, 0, false
	}
	rtt := p.Received.Sub(p.Sent)
	mid := p.Sent.Add(rtt / 2)
	// The header drops the fraction of the server's second: on average half
	// a second behind.
	skew = p.Date.Add(500 * time.Millisecond).Sub(mid)
	return skew, rtt/2 + 500*time.Millisecond, true
}

// Clock judges the skew p measured. Only skew beyond the measurement's
// uncertainty counts: above warnAbove it warns, above failAbove it fails,
// and why says what goes wrong then.
func Clock(check, who string, p Probe, warnAbove, failAbove time.Duration, why string) Result {
	skew, unc, measured := p.Skew()
	if !measured {
		if p.Err != nil {
			return skip(check, "not measured: "+who+" did not answer")
		}
		return warn(check, who+" sent no Date header: skew not measured", "compare this machine's clock with "+who+"'s host by hand")
	}
	abs := skew.Abs()
	sure := max(abs-unc, 0)
	dir := "ahead of"
	if skew < 0 {
		dir = "behind"
	}
	shown := abs.Round(100 * time.Millisecond)
	if abs > 10*time.Second {
		shown = abs.Round(time.Second)
	}
	found := fmt.Sprintf("%s's clock is %s %s this machine's (±%s)", who, shown, dir,
		unc.Round(100*time.Millisecond))
	if abs <= unc {
		found = fmt.Sprintf("%s's clock agrees with this machine's (to within %s)", who, unc.Round(100*time.Millisecond))
	}
	fix := "synchronise the clocks of both machines (NTP: timedatectl set-ntp true, chronyc tracking)"
	switch {
	case sure > failAbove:
		return fail(check, fmt.Sprintf("%s: more than %s, %s", found, failAbove, why), fix)
	case sure > warnAbove:
		return warn(check, fmt.Sprintf("%s: more than %s (at %s, %s)", found, warnAbove, failAbove, why), fix)
	}
	return ok(check, "%s", found)
}
