package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/limenhq/limen/gateway/profile"
)

func newLoginCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "login",
		Short: "Log in to a Limen proxy and store a short-lived certificate in ~/.limen/<proxy>/",
		Long: `Log in to a Limen proxy. A key pair is made on this machine; only a
certificate request leaves it. The certificate, key and proxy CA are kept in
~/.limen/<proxy>/ (or $LIMEN_HOME/<proxy>/).

Trust the proxy with --ca-fingerprint (printed by limen proxy at start), with
--ca-file, or, when the proxy has a publicly trusted certificate, through the
system roots.`,
		Args: cobra.NoArgs,
		RunE: runLogin,
	}
	f := cmd.Flags()
	f.String("proxy", "", "proxy HOST:PORT (default: the last one logged in to)")
	f.String("user", "", "user name (default: your login name)")
	f.Bool("password-stdin", false, "read the password from the first line of standard input")
	f.String("ca-file", "", "PEM file with the proxy's CA")
	f.String("ca-fingerprint", "", "SHA-256 fingerprint of the proxy's CA, as limen proxy prints it")
	f.Duration("ttl", 0, "ask for a certificate shorter than the proxy's maximum")
	addLoginIdentityFlags(f)
	return cmd
}

func runLogin(cmd *cobra.Command, _ []string) error {
	v, err := loadConfig(cmd)
	if err != nil {
		return err
	}
	if done, err := loginOther(cmd, v); done {
		return err
	}
	p, home, err := openProfile(v.GetString("proxy"))
	if err != nil {
		return err
	}
	name := v.GetString("user")
	if name == "" {
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
	}
	if name == "" {
		return errors.New("user: cannot tell your login name; pass --user")
	}
	pw, err := readPassword(cmd, v.GetBool("password-stdin"), fmt.Sprintf("Password for %s@%s: ", name, p.Proxy), false)
	if err != nil {
		return err
	}
	resp, err := p.Login(cmd.Context(), profile.LoginRequest{User: name, Password: pw, TTL: v.GetDuration("ttl"),
		Trust: profile.Trust{CAFile: v.GetString("ca-file"), Fingerprint: v.GetString("ca-fingerprint")}})
	if err != nil {
		return err
	}
	if err := profile.SetCurrent(home, p.Proxy); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "Logged in to %s as %s, valid until %s.\n", p.Proxy, resp.Principal.String(),
		resp.Expires.Local().Format(time.RFC1123))
	return nil
}

// openProfile resolves --proxy (or the current proxy) to its profile.
// commandProfile opens the profile of the proxy named by the command's
// --proxy (or LIMEN_PROXY, or the config file; default: the last one
// logged in to).
func commandProfile(cmd *cobra.Command) (*profile.Profile, error) {
	v, err := loadConfig(cmd)
	if err != nil {
		return nil, err
	}
	p, _, err := openProfile(v.GetString("proxy"))
	return p, err
}

func openProfile(proxy string) (*profile.Profile, string, error) {
	home, err := profile.Home()
	if err != nil {
		return nil, "", err
	}
	if proxy == "" {
		if proxy, err = profile.Current(home); err != nil {
			return nil, "", err
		}
	}
	p, err := profile.Open(home, proxy)
	return p, home, err
}

// readPassword reads one line from stdin when fromStdin is set, else asks on
// the terminal (twice when confirm is set). It never echoes.
func readPassword(cmd *cobra.Command, fromStdin bool, prompt string, confirm bool) (string, error) {
	if fromStdin {
		line, err := bufio.NewReader(io.LimitReader(cmd.InOrStdin(), 4096)).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return "", fmt.Errorf("read password from standard input: %w", err)
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			return "", errors.New("password-stdin: standard input held no password")
		}
		return line, nil
	}
	fd := int(os.Stdin.Fd())
	if !term.IsTerminal(fd) {
		return "", errors.New("no terminal to ask for the password on: use --password-stdin")
	}
	ask := func(p string) (string, error) {
		fmt.Fprint(cmd.ErrOrStderr(), p)
		b, err := term.ReadPassword(fd)
		fmt.Fprintln(cmd.ErrOrStderr())
		return string(b), err
	}
	pw, err := ask(prompt)
	if err != nil {
		return "", fmt.Errorf("read password: %w", err)
	}
	if confirm {
		again, err := ask("Repeat: ")
		if err != nil {
			return "", fmt.Errorf("read password: %w", err)
		}
		if again != pw {
			return "", errors.New("the passwords differ")
		}
	}
	return pw, nil
}
