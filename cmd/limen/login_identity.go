package main

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"golang.org/x/oauth2"

	"github.com/limenhq/limen/gateway/authapi"
	"github.com/limenhq/limen/gateway/ca"
	"github.com/limenhq/limen/gateway/profile"
)

// addLoginIdentityFlags adds the OIDC and bot logins to limen login.
func addLoginIdentityFlags(f *pflag.FlagSet) {
	f.Bool("oidc", false, "sign in through the proxy's identity provider (code flow with PKCE and a loopback redirect)")
	f.Bool("device", false, "with --oidc: use the device flow, for machines without a browser")
	f.Bool("no-browser", false, "with --oidc: only print the sign-in URL, do not open a browser")
	f.Duration("oidc-timeout", 5*time.Minute, "with --oidc: how long to wait for the sign-in in the browser")
	f.String("bot", "", "log in as this bot (CI), with --token-file or --id-token-file")
	f.String("token-file", "", "with --bot: file holding the bot's join secret (limen bots token)")
	f.String("id-token-file", "", "with --bot: file holding an OIDC ID token from a trusted CI issuer (keyless)")
}

// loginOther runs an OIDC or bot login when the flags ask for one; done
// false means a password login.
func loginOther(cmd *cobra.Command, v *viper.Viper) (done bool, err error) {
	useOIDC, bot := v.GetBool("oidc"), v.GetString("bot")
	switch {
	case !useOIDC && bot == "":
		for _, k := range []string{"device", "no-browser"} {
			if v.GetBool(k) {
				return true, fmt.Errorf("--%s: only with --oidc", k)
			}
		}
		for _, k := range []string{"token-file", "id-token-file"} {
			if v.GetString(k) != "" {
				return true, fmt.Errorf("--%s: only with --bot", k)
			}
		}
		return false, nil
	case useOIDC && bot != "":
		return true, errors.New("--oidc and --bot: choose one (a bot uses --id-token-file for keyless logins)")
	}
	p, home, err := openProfile(v.GetString("proxy"))
	if err != nil {
		return true, err
	}
	trust := profile.Trust{CAFile: v.GetString("ca-file"), Fingerprint: v.GetString("ca-fingerprint")}
	ttl := v.GetDuration("ttl")
	var resp *authapi.LoginResponse
	if bot != "" {
		bl := profile.BotLogin{Bot: bot, TokenFile: v.GetString("token-file"), IDTokenFile: v.GetString("id-token-file"), TTL: ttl}
		if (bl.TokenFile == "") == (bl.IDTokenFile == "") {
			return true, errors.New("--bot: give exactly one of --token-file and --id-token-file")
		}
		if resp, err = p.LoginWith(cmd.Context(), trust, ttl, botLogin(bl)); err != nil {
			return true, err
		}
		// Recorded so that limen kube credentials can log the bot in again.
		if err := p.SaveBotLogin(bl); err != nil {
			return true, err
		}
	} else {
		ctx, cancel := context.WithTimeout(cmd.Context(), v.GetDuration("oidc-timeout"))
		defer cancel()
		login := codeLogin(cmd.ErrOrStderr(), !v.GetBool("no-browser"))
		if v.GetBool("device") {
			login = deviceLogin(cmd.ErrOrStderr())
		}
		if resp, err = p.LoginWith(ctx, trust, ttl, login); err != nil {
			return true, err
		}
		if err := p.ForgetBotLogin(); err != nil {
			return true, err
		}
	}
	if err := profile.SetCurrent(home, p.Proxy); err != nil {
		return true, err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "Logged in to %s as %s, valid until %s.\n", p.Proxy, resp.Principal.String(),
		resp.Expires.Local().Format(time.RFC1123))
	return true, nil
}

func randomString() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// codeLogin is the code flow: a loopback listener receives the code, which
// the proxy redeems with the PKCE verifier made here.
func codeLogin(out io.Writer, openBrowser bool) profile.LoginFunc {
	return func(ctx context.Context, c *authapi.Client, csr, ttl string) (authapi.LoginResponse, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return authapi.LoginResponse{}, fmt.Errorf("listen for the sign-in redirect: %w", err)
		}
		defer ln.Close()
		redirect := "http://" + ln.Addr().String() + "/callback"
		state, nonce, verifier := randomString(), randomString(), oauth2.GenerateVerifier()
		u, err := c.OIDCURL(ctx, authapi.OIDCURLRequest{RedirectURI: redirect, State: state, Nonce: nonce,
			CodeChallenge: oauth2.S256ChallengeFromVerifier(verifier)})
		if err != nil {
			return authapi.LoginResponse{}, err
		}
		type result struct{ code, err string }
		got := make(chan result, 1)
		srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			q := r.URL.Query()
			if r.URL.Path != "/callback" || subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(state)) != 1 {
				// Another page or a forged redirect: not this login's answer.
				http.Error(w, "not this login's redirect", http.StatusBadRequest)
				return
			}
			res := result{code: q.Get("code")}
			if e := q.Get("error"); e != "" || res.code == "" {
				res.err = strings.TrimSpace(e + ": " + q.Get("error_description"))
			}
			select {
			case got <- res:
			default:
			}
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			msg := "Signed in. You can close this window and return to the terminal."
			if res.err != "" {
				msg = "Sign-in failed: " + res.err
			}
			fmt.Fprintf(w, "<!doctype html><title>Limen</title><p id=\"limen-result\">%s</p>", html.EscapeString(msg))
		})}
		go srv.Serve(ln)
		defer srv.Close()
		fmt.Fprintf(out, "Open this URL to sign in:\n\n  %s\n\n", u.URL)
		if openBrowser {
			if err := browse(u.URL); err != nil {
				fmt.Fprintf(out, "(no browser opened: %v)\n", err)
			}
		}
		var res result
		select {
		case res = <-got:
		case <-ctx.Done():
			return authapi.LoginResponse{}, fmt.Errorf("no sign-in arrived at %s in time: %w", redirect, ctx.Err())
		}
		if res.err != "" {
			return authapi.LoginResponse{}, fmt.Errorf("the identity provider refused the sign-in: %s", res.err)
		}
		return c.OIDCLogin(ctx, authapi.OIDCLoginRequest{RedirectURI: redirect, Code: res.code, CodeVerifier: verifier,
			Nonce: nonce, CSR: csr, TTL: ttl})
	}
}

// browse opens url in the user's browser, when there is one: $BROWSER, or
// the desktop's opener.
func browse(url string) error {
	if b := os.Getenv("BROWSER"); b != "" {
		return exec.Command(b, url).Start()
	}
	switch runtime.GOOS {
	case "darwin":
		return exec.Command("open", url).Start()
	case "windows":
		return exec.Command("rundll32", "url.dll,FileProtocolHandler", url).Start()
	}
	if os.Getenv("DISPLAY") == "" && os.Getenv("WAYLAND_DISPLAY") == "" {
		return errors.New("no display; open the URL yourself, or use --device")
	}
	return exec.Command("xdg-open", url).Start()
}

// deviceLogin is the device flow: the user approves a code on another
// device; the proxy polls the provider.
func deviceLogin(out io.Writer) profile.LoginFunc {
	return func(ctx context.Context, c *authapi.Client, csr, ttl string) (authapi.LoginResponse, error) {
		d, err := c.OIDCDevice(ctx)
		if err != nil {
			return authapi.LoginResponse{}, err
		}
		fmt.Fprintf(out, "To sign in, open %s and enter the code %s\n", d.VerificationURI, d.UserCode)
		if d.VerificationURIComplete != "" {
			fmt.Fprintf(out, "or open %s\n", d.VerificationURIComplete)
		}
		for {
			r, err := c.OIDCDeviceToken(ctx, authapi.DeviceTokenRequest{DeviceCode: d.DeviceCode, Interval: d.Interval, CSR: csr, TTL: ttl})
			if err != nil {
				return authapi.LoginResponse{}, err
			}
			if !r.Pending && r.Login != nil {
				return *r.Login, nil
			}
			if err := ctx.Err(); err != nil {
				return authapi.LoginResponse{}, fmt.Errorf("the code was not approved in time: %w", err)
			}
		}
	}
}

// botLogin logs a bot in with the secret or ID token in its file, read
// afresh each time.
func botLogin(bl profile.BotLogin) profile.LoginFunc {
	return func(ctx context.Context, c *authapi.Client, csr, ttl string) (authapi.LoginResponse, error) {
		file := bl.TokenFile
		if file == "" {
			file = bl.IDTokenFile
		}
		data, err := os.ReadFile(file)
		if err != nil {
			return authapi.LoginResponse{}, fmt.Errorf("bot %s: %w", bl.Bot, err)
		}
		tok := strings.TrimSpace(string(data))
		if tok == "" {
			return authapi.LoginResponse{}, fmt.Errorf("bot %s: %s is empty", bl.Bot, file)
		}
		if bl.TokenFile != "" {
			return c.BotLogin(ctx, authapi.BotLoginRequest{Bot: bl.Bot, Token: tok, CSR: csr, TTL: ttl})
		}
		return c.BotOIDCLogin(ctx, authapi.BotOIDCLoginRequest{Bot: bl.Bot, IDToken: tok, CSR: csr, TTL: ttl})
	}
}

// pluginCredentials are the credentials the kubectl plugin prints. For a
// bot that logged in with --bot it first renews a certificate that has
// expired or is in the last third of its life, without a person, for as
// long as the bot's secret or token is accepted.
func pluginCredentials(ctx context.Context, p *profile.Profile, now time.Time) (*profile.Credentials, error) {
	creds, err := p.Credentials(now)
	bl, berr := p.BotLogin()
	if berr != nil || bl == nil {
		return creds, err
	}
	if creds != nil && creds.Cert != nil {
		who, perr := ca.PrincipalOfCert(creds.Cert)
		if perr != nil || who.String() != "bot:"+bl.Bot {
			// A person logged in since; their certificate is not the bot's.
			return creds, err
		}
		life := creds.Cert.NotAfter.Sub(creds.Cert.NotBefore)
		if err == nil && creds.Cert.NotAfter.Sub(now) > life/3 {
			return creds, nil
		}
	}
	if _, rerr := p.LoginWith(ctx, profile.Trust{}, bl.TTL, botLogin(*bl)); rerr != nil {
		if err == nil {
			return creds, nil // still valid: use it, renew next time
		}
		return nil, fmt.Errorf("renew bot %s: %w", bl.Bot, rerr)
	}
	return p.Credentials(now)
}
