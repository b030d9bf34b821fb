package policy

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// refreshRefused refreshes e and wants a refusal for reason of revision rev,
// with the active revision unchanged.
func refreshRefused(t *testing.T, e *Engine, reason, rev string) Refusal {
	t.Helper()
	before := e.Status().Revision
	err := e.Refresh(context.Background())
	if !errors.Is(err, ErrBundleRefused) {
		t.Fatalf("Refresh = %v, want a %s refusal", err, reason)
	}
	st := e.Status()
	if len(st.Refusals) == 0 {
		t.Fatalf("Refresh refused (%v) but the status lists no refusal: %+v", err, st)
	}
	r := st.Refusals[0]
	if r.Reason != reason || r.Revision != rev || r.Active != before || st.Revision != before {
		t.Fatalf("refusal %+v (active now %q), want reason %s for revision %s with %q still active", r, st.Revision, reason, rev, before)
	}
	return r
}

func TestRollbackAgainstActiveRevisionRefused(t *testing.T) {
	priv, _ := testKeys(t)
	srv := newBundleServer(t)
	e := serviceEngine(t, srv, "")
	srv.serve(buildBundle(t, "20250102000000", defaultRego(t), bobData("limen:view"), priv), `"new"`)
	if err := e.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	// An older bundle, validly signed: what a compromised or misconfigured
	// bundle host would serve to bring back a policy that was revoked.
	srv.serve(buildBundle(t, "20250101000000", defaultRego(t), bobData("limen:edit"), priv), `"old"`)
	r := refreshRefused(t, e, ReasonRollback, "20250101000000")
	if !strings.Contains(r.Error, "older than revision 20250102000000") {
		t.Fatalf("refusal says %q: want it to name both revisions", r.Error)
	}
	wantGroups(t, e, "limen:view")
	// Numbers, not strings: "9" < "10" although it sorts after it.
	srv.serve(buildBundle(t, "9", defaultRego(t), bobData("limen:edit"), priv), `"9"`)
	refreshRefused(t, e, ReasonRollback, "9")
	wantGroups(t, e, "limen:view")
	// Forward still works.
	srv.serve(buildBundle(t, "20250103000000", defaultRego(t), bobData("limen:edit"), priv), `"newer"`)
	if err := e.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantGroups(t, e, "limen:edit")
}

// TestRollbackAgainstPersistedRevisionAfterRestart: a restarted process
// remembers, through its persisted last-good bundle, how far the revision
// had moved, and a bundle service serving an older one is refused.
func TestRollbackAgainstPersistedRevisionAfterRestart(t *testing.T) {
	priv, _ := testKeys(t)
	dir := t.TempDir()
	srv := newBundleServer(t)
	first := serviceEngine(t, srv, dir)
	srv.serve(buildBundle(t, "5", defaultRego(t), bobData("limen:view"), priv), `"5"`)
	if err := first.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	first.Close()

	srv.serve(buildBundle(t, "4", defaultRego(t), bobData("limen:edit"), priv), `"4"`)
	second := serviceEngine(t, srv, dir)
	if st := second.Status(); st.Revision != "5" {
		t.Fatalf("after the restart revision %q is active, want the persisted 5", st.Revision)
	}
	refreshRefused(t, second, ReasonRollback, "4")
	wantGroups(t, second, "limen:view")
	saved, err := ReadStatus(dir)
	if err != nil || len(saved.Refusals) == 0 || saved.Refusals[0].Reason != ReasonRollback {
		t.Fatalf("saved status = %+v, %v: want the rollback for limen policy status", saved, err)
	}
	// The persisted bundle is the floor even when this binary cannot
	// activate it (stricter checks after an upgrade): nothing older may
	// take its place, and decisions fail closed until a newer one comes.
	second.Close()
	evil := withFile(defaultRego(t), "evil.rego", "package limen.kube\n\ngroups contains \"system:masters\" if input.principal.name == \"bob\"\n")
	if err := os.WriteFile(filepath.Join(dir, bundleFile), buildBundle(t, "6", evil, bobData("limen:view"), priv), 0o600); err != nil {
		t.Fatal(err)
	}
	third := serviceEngine(t, srv, dir)
	if _, err := third.Groups(context.Background(), bob, demo); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Groups = %v, want ErrUnavailable: the persisted bundle cannot activate", err)
	}
	refreshRefused(t, third, ReasonRollback, "4")
	if _, err := third.Groups(context.Background(), bob, demo); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Groups = %v after the rollback, want ErrUnavailable", err)
	}
	srv.serve(buildBundle(t, "7", defaultRego(t), bobData("limen:edit"), priv), `"7"`)
	if err := third.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantGroups(t, third, "limen:edit")
}

func TestSameRevisionOtherContentRefused(t *testing.T) {
	priv, _ := testKeys(t)
	dir := t.TempDir()
	srv := newBundleServer(t)
	e := serviceEngine(t, srv, dir)
	srv.serve(buildBundle(t, "3", defaultRego(t), bobData("limen:view"), priv), `"a"`)
	if err := e.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	activated := e.Status().ActivatedAt

	// The same revision and content again, under another ETag (a server
	// without ETags, or a rebuild): nothing to do, and no refusal.
	srv.serve(buildBundle(t, "3", defaultRego(t), bobData("limen:view"), priv), `"a-again"`)
	if err := e.Refresh(context.Background()); err != nil {
		t.Fatalf("re-serving the active bundle: %v", err)
	}
	if st := e.Status(); st.Refused != 0 || len(st.Refusals) != 0 || !st.ActivatedAt.Equal(activated) {
		t.Fatalf("status = %+v: re-serving the active bundle must neither refuse nor re-activate", st)
	}

	// The same number with other content, validly signed: a replay of an
	// old bundle that reused the number, or a forgery.
	srv.serve(buildBundle(t, "3", defaultRego(t), bobData("limen:edit"), priv), `"b"`)
	refreshRefused(t, e, ReasonSameRevision, "3")
	wantGroups(t, e, "limen:view")
	// Other policy under the same revision is refused as well.
	srv.serve(buildBundle(t, "3", withFile(defaultRego(t), "extra.rego", "package limen.extra\n\nx := 1\n"), bobData("limen:view"), priv), `"c"`)
	refreshRefused(t, e, ReasonSameRevision, "3")
	wantGroups(t, e, "limen:view")

	// Also against the persisted bundle after a restart.
	e.Close()
	srv.serve(buildBundle(t, "3", defaultRego(t), bobData("limen:edit"), priv), `"b"`)
	restarted := serviceEngine(t, srv, dir)
	refreshRefused(t, restarted, ReasonSameRevision, "3")
	wantGroups(t, restarted, "limen:view")
}

// TestHTTPBundleURLRefusedAtConfig: a plain-http bundle URL is a
// configuration error naming the key, before anything is fetched.
func TestHTTPBundleURLRefusedAtConfig(t *testing.T) {
	_, pub := testKeys(t)
	var hits int
	plain := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits++ }))
	defer plain.Close()
	_, err := New(context.Background(), Options{BundleURL: plain.URL + "/bundle.tar.gz", PublicKeyPEM: pub, Logger: quietLogger()})
	if err == nil || !strings.Contains(err.Error(), "policy-bundle-url") || !strings.Contains(err.Error(), "https") {
		t.Fatalf("New with an http bundle URL = %v, want a configuration error naming policy-bundle-url and https", err)
	}
	if hits != 0 {
		t.Fatalf("the http server was asked %d times", hits)
	}
}

// TestRedirectAwayFromHTTPSRefused: an https bundle service that redirects
// to http is refused before the http request is sent.
func TestRedirectAwayFromHTTPSRefused(t *testing.T) {
	priv, _ := testKeys(t)
	var plainHits int
	plain := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { plainHits++ }))
	defer plain.Close()
	srv := newBundleServer(t)
	srv.serve(buildBundle(t, "1", defaultRego(t), bobData("limen:view"), priv), `"1"`)
	e := serviceEngine(t, srv, "")
	if err := e.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.redirectTo(plain.URL + "/bundle.tar.gz")
	r := refreshRefused(t, e, ReasonNotHTTPS, "")
	if !strings.Contains(r.Error, plain.URL) {
		t.Fatalf("refusal says %q: want it to name the http URL", r.Error)
	}
	if plainHits != 0 {
		t.Fatalf("the http server was asked %d times", plainHits)
	}
	wantGroups(t, e, "limen:view")
}

// TestBundleCA: policy-bundle-ca is the only trust for the bundle server;
// a server whose certificate does not chain to it is a fetch error.
func TestBundleCA(t *testing.T) {
	priv, pub := testKeys(t)
	srv := newBundleServer(t)
	srv.serve(buildBundle(t, "1", defaultRego(t), bobData("limen:view"), priv), `"1"`)
	other := newBundleServer(t)
	for _, tt := range []struct {
		name string
		ca   []byte
		ok   bool
	}{
		{"its own CA", srv.caPEM(), true},
		{"system roots only", nil, false},
		{"another server's CA", other.caPEM(), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e, err := New(context.Background(), Options{BundleURL: srv.URL, BundleCAPEM: tt.ca, PublicKeyPEM: pub, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			err = e.Refresh(context.Background())
			if tt.ok {
				if err != nil {
					t.Fatal(err)
				}
				wantGroups(t, e, "limen:view")
				return
			}
			st := e.Status()
			if err == nil || !strings.Contains(err.Error(), "certificate") || st.Revision != "" || st.Refusals[0].Reason != ReasonFetch {
				t.Fatalf("Refresh = %v, status %+v: want a certificate fetch error", err, st)
			}
		})
	}
}

// TestRefusalsCollapseAndStayBounded: a refusal repeated by every poll is
// one entry with a count, and the list keeps the latest MaxRefusals.
func TestRefusalsCollapseAndStayBounded(t *testing.T) {
	priv, _ := testKeys(t)
	srv := newBundleServer(t)
	e := serviceEngine(t, srv, "")
	srv.serve(buildBundle(t, "100", defaultRego(t), bobData("limen:view"), priv), `"100"`)
	if err := e.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.serve(buildBundle(t, "99", defaultRego(t), bobData("limen:edit"), priv), `"99"`)
	for range 3 {
		e.Refresh(context.Background())
	}
	st := e.Status()
	if len(st.Refusals) != 1 || st.Refusals[0].Count != 3 || st.Refusals[0].First.After(st.Refusals[0].At) || st.Refused != 3 {
		t.Fatalf("status = %+v: want one rollback entry counted 3 times", st)
	}
	for i := range MaxRefusals + 2 {
		rev := strconv.Itoa(i)
		srv.serve(buildBundle(t, rev, defaultRego(t), bobData("limen:edit"), priv), `"`+rev+`"`)
		e.Refresh(context.Background())
	}
	st = e.Status()
	if len(st.Refusals) != MaxRefusals || st.Refusals[0].Revision != strconv.Itoa(MaxRefusals+1) {
		t.Fatalf("refusals = %+v: want the latest %d, newest first", st.Refusals, MaxRefusals)
	}
}

func TestParseRevision(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want uint64
		err  string
	}{
		{"0", 0, ""},
		{"1", 1, ""},
		{"20250131235959", 20250131235959, ""},
		{"18446744073709551615", math.MaxUint64, ""},
		{"18446744073709551616", 0, "64 bits"},
		{"99999999999999999999", 0, "64 bits"},
		{"123456789012345678901", 0, "longer than 20 digits"},
		{"", 0, "no revision"},
		{"007", 0, "leading zero"},
		{"00", 0, "leading zero"},
		{"+1", 0, "not an unsigned decimal integer"},
		{"-1", 0, "not an unsigned decimal integer"},
		{" 1", 0, "not an unsigned decimal integer"},
		{"1_000", 0, "not an unsigned decimal integer"},
		{"0x10", 0, "not an unsigned decimal integer"},
		{"1e3", 0, "not an unsigned decimal integer"},
		{"v1.2.3", 0, "not an unsigned decimal integer"},
		{"2025-01-31T23:59:59Z", 0, "not an unsigned decimal integer"},
		{"١٢٣", 0, "not an unsigned decimal integer"}, // Arabic-Indic digits
	} {
		n, err := ParseRevision(tt.in)
		if tt.err == "" {
			if err != nil || n != tt.want {
				t.Errorf("ParseRevision(%q) = %d, %v; want %d", tt.in, n, err, tt.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("ParseRevision(%q) = %d, %v; want an error mentioning %q", tt.in, n, err, tt.err)
		}
	}
}

// FuzzParseRevision: never a panic; an accepted revision is the one
// spelling of its number, so equal revisions are equal strings and the
// order of numbers is the order of revisions.
func FuzzParseRevision(f *testing.F) {
	for _, s := range []string{"0", "1", "10", "20250131235959", "18446744073709551615", "18446744073709551616", "007", "+1", "", "1_0", "９"} {
		f.Add(s, "9")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		na, erra := ParseRevision(a)
		nb, errb := ParseRevision(b)
		if erra == nil && strconv.FormatUint(na, 10) != a {
			t.Fatalf("accepted %q as %d: not its one spelling", a, na)
		}
		if erra != nil && len(a) <= MaxRevisionDigits {
			if n, err := strconv.ParseUint(a, 10, 64); err == nil && strconv.FormatUint(n, 10) == a {
				t.Fatalf("refused %q, the canonical spelling of %d: %v", a, n, erra)
			}
		}
		if erra == nil && errb == nil && (na == nb) != (a == b) {
			t.Fatalf("%q and %q: equal numbers %v but equal strings %v", a, b, na == nb, a == b)
		}
	})
}
