package idp

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
)

// SignIn plays the browser's part of the code flow with plain HTTP: it
// opens authURL, signs in as email, and returns the URL the IdP redirects
// to (the relying party's redirect URI with code and state), without
// requesting it. For tests that need no real browser.
func SignIn(authURL, redirectPrefix, email, password string) (*url.URL, error) {
	jar, _ := cookiejar.New(nil)
	var final *url.URL
	c := &http.Client{Jar: jar, CheckRedirect: func(r *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(r.URL.String(), redirectPrefix) {
			final = r.URL
			return http.ErrUseLastResponse
		}
		return nil
	}}
	resp, err := c.Get(authURL)
	if err != nil {
		return nil, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if final != nil {
		return final, nil
	}
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != pathLogin {
		return nil, fmt.Errorf("idp: the authorization URL led to %s (%s), not the sign-in page", resp.Request.URL, resp.Status)
	}
	resp, err = c.PostForm(resp.Request.URL.String(), url.Values{"id": {resp.Request.URL.Query().Get("id")},
		"username": {email}, "password": {password}})
	if err != nil {
		return nil, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if final == nil {
		return nil, fmt.Errorf("idp: sign-in answered %s: %s", resp.Status, body)
	}
	if e := final.Query().Get("error"); e != "" {
		return final, errors.New("idp: " + e + ": " + final.Query().Get("error_description"))
	}
	return final, nil
}
