package policy

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestOptionsValidate(t *testing.T) {
	_, pub := testKeys(t)
	priv, _ := testKeys(t)
	tests := []struct {
		name string
		opts Options
		want string // "" means valid
	}{
		{"embedded default", Options{}, ""},
		{"service", Options{BundleURL: "https://b.example/limen.tar.gz", PublicKeyPEM: pub}, ""},
		{"service without key", Options{BundleURL: "https://b.example/x"}, "policy-public-key: required"},
		{"key without service", Options{PublicKeyPEM: pub}, "policy-bundle-url is not"},
		{"relative url", Options{BundleURL: "b.example/x", PublicKeyPEM: pub}, "policy-bundle-url"},
		{"file url", Options{BundleURL: "file:///etc/passwd", PublicKeyPEM: pub}, "policy-bundle-url"},
		{"http url", Options{BundleURL: "http://b.example/limen.tar.gz", PublicKeyPEM: pub}, "policy-bundle-url"},
		{"uppercase http url", Options{BundleURL: "HTTP://b.example/limen.tar.gz", PublicKeyPEM: pub}, "policy-bundle-url"},
		{"bundle ca", Options{BundleURL: "https://b/x", PublicKeyPEM: pub, BundleCAPEM: pub}, "policy-bundle-ca: no PEM certificate"},
		{"bundle ca without url", Options{BundleCAPEM: pub}, "policy-bundle-ca is set but policy-bundle-url is not"},
		{"url no host", Options{BundleURL: "https:///x", PublicKeyPEM: pub}, "policy-bundle-url"},
		{"private key given", Options{BundleURL: "https://b/x", PublicKeyPEM: priv}, "never the private key"},
		{"garbage key", Options{BundleURL: "https://b/x", PublicKeyPEM: []byte("not pem")}, "not a PEM block"},
		{"unknown algorithm", Options{BundleURL: "https://b/x", PublicKeyPEM: pub, KeyAlgorithm: "none"}, "policy-key-algorithm"},
		{"short hmac", Options{BundleURL: "https://b/x", PublicKeyPEM: []byte("short"), KeyAlgorithm: "HS256"}, "at least 32"},
		{"delays reversed", Options{BundleURL: "https://b/x", PublicKeyPEM: pub, MinDelay: time.Minute, MaxDelay: time.Second}, "policy-min-delay"},
		{"delay too short", Options{BundleURL: "https://b/x", PublicKeyPEM: pub, MinDelay: time.Millisecond}, "policy-min-delay"},
		{"skip verify with service", Options{BundleURL: "https://b/x", PublicKeyPEM: pub, InsecureSkipVerify: true}, "always verified"},
		{"url and file", Options{BundleURL: "https://b/x", PublicKeyPEM: pub, Bundle: []byte{1}}, "exclusive"},
		{"file without key", Options{Bundle: []byte{1}}, "needs policy-public-key"},
		{"file skip verify", Options{Bundle: []byte{1}, InsecureSkipVerify: true}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate = %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}

// TestValidateTwice: validating options again (a caller, then New) keeps
// the client Validate built, with its CA.
func TestValidateTwice(t *testing.T) {
	_, pub := testKeys(t)
	srv := newBundleServer(t)
	o := Options{BundleURL: srv.URL, BundleCAPEM: srv.caPEM(), PublicKeyPEM: pub, Logger: quietLogger()}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	client := o.HTTPClient
	if err := o.Validate(); err != nil || o.HTTPClient != client {
		t.Fatalf("second Validate = %v (client kept: %v)", err, o.HTTPClient == client)
	}
	e, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	priv, _ := testKeys(t)
	srv.serve(buildBundle(t, "1", defaultRego(t), bobData("limen:view"), priv), `"1"`)
	if err := e.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestStaticBundle(t *testing.T) {
	priv, pub := testKeys(t)
	raw := buildBundle(t, "1", defaultRego(t), bobData("limen:view"), priv)
	e, err := New(context.Background(), Options{Bundle: raw, PublicKeyPEM: pub, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	wantGroups(t, e, "limen:view")
	if st := e.Status(); st.Source != SourceStatic || st.Revision != "1" {
		t.Fatalf("status = %+v", st)
	}
	unsigned := buildBundle(t, "2", defaultRego(t), bobData("limen:view"), nil)
	if _, err := New(context.Background(), Options{Bundle: unsigned, PublicKeyPEM: pub, Logger: quietLogger()}); err == nil {
		t.Fatal("unsigned static bundle accepted with a key configured")
	}
	if _, err := New(context.Background(), Options{Bundle: unsigned, InsecureSkipVerify: true, Logger: quietLogger()}); err != nil {
		t.Fatalf("skip-verify static bundle: %v", err)
	}
}
