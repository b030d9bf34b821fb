package authapi

import "testing"

func TestLoopbackRedirect(t *testing.T) {
	for uri, ok := range map[string]bool{
		"http://127.0.0.1:4711/callback":     true,
		"http://[::1]:4711/callback":         true,
		"http://127.0.0.1/callback":          false, // no port
		"https://127.0.0.1:4711/callback":    false,
		"http://evil.example:4711/callback":  false,
		"http://localhost:4711/callback":     false, // a name can resolve anywhere
		"http://127.0.0.1:4711/other":        false,
		"http://127.0.0.1:4711/callback?x=1": false,
	} {
		if err := loopback(uri); (err == nil) != ok {
			t.Errorf("loopback(%q) = %v, want ok=%v", uri, err, ok)
		}
	}
}
