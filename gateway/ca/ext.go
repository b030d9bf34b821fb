package ca

import (
	"encoding/asn1"
	"errors"
	"fmt"
	"sort"

	"github.com/limenhq/limen/gateway/identity"
	"github.com/limenhq/limen/gateway/kpath"
)

// Limen's certificate extensions live under a private-enterprise-style arc.
// Both are non-critical so that ordinary X.509 verifiers (Go's TLS stack,
// kubectl) accept the certificates; only Limen reads them.
//
// The principal extension (OIDPrincipal) is the DER encoding of
//
//	LimenPrincipal ::= SEQUENCE {
//	    version   INTEGER (2),
//	    kind      UTF8String,            -- "user" or "bot"
//	    name      UTF8String,
//	    issuer    UTF8String,            -- provenance: empty is local, else identity.ValidIssuer
//	    clientID  UTF8String,            -- the one client (identity.ValidClient); empty gets nothing
//	    loginID   UTF8String,            -- empty: unknown
//	    traits    SEQUENCE OF Trait      -- sorted by name, names unique
//	}
//	Trait ::= SEQUENCE { name UTF8String, values SEQUENCE OF DirectoryString }
//
// The worker extension (OIDWorkerCluster) is
//
//	LimenWorker ::= SEQUENCE { version INTEGER (1), cluster UTF8String }
//
// A decoder refuses any other version, trailing bytes, duplicate trait names,
// oversized input and any principal that fails identity.Principal.Validate.
// Version 1 had no issuer: its certificates are refused rather than read as
// local, since an identity provider's user would then be the local user of
// the same name (its holder logs in again).
var (
	OIDPrincipal     = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 64297, 1, 1}
	OIDWorkerCluster = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 64297, 1, 2}
)

// ExtensionVersion is the only version of the worker extension this code
// writes and reads.
const ExtensionVersion = 1

// PrincipalVersion is the only version of the principal extension this
// code writes and reads (2: the principal's issuer).
const PrincipalVersion = 2

// Bounds on what an extension may carry, so a certificate cannot make the
// proxy allocate without limit.
const (
	maxExtensionBytes = 32 << 10
	maxTraits         = 64
	maxTraitValues    = 256
)

// ErrBadExtension means a certificate's Limen extension is missing, of an
// unknown version or malformed.
var ErrBadExtension = errors.New("limen certificate extension")

type principalASN1 struct {
	Version  int
	Kind     string `asn1:"utf8"`
	Name     string `asn1:"utf8"`
	Issuer   string `asn1:"utf8"`
	ClientID string `asn1:"utf8"`
	LoginID  string `asn1:"utf8"`
	Traits   []traitASN1
}

type traitASN1 struct {
	Name   string `asn1:"utf8"`
	Values []string
}

type workerASN1 struct {
	Version int
	Cluster string `asn1:"utf8"`
}

// EncodePrincipal returns the DER value of the principal extension for p.
func EncodePrincipal(p identity.Principal) ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := identity.ValidClient(p.ClientID); p.ClientID != "" && err != nil {
		return nil, err
	}
	if len(p.Traits) > maxTraits {
		return nil, fmt.Errorf("principal has %d traits, at most %d are allowed", len(p.Traits), maxTraits)
	}
	v := principalASN1{Version: PrincipalVersion, Kind: string(p.Kind), Name: p.Name, Issuer: p.Issuer,
		ClientID: p.ClientID, LoginID: p.LoginID, Traits: []traitASN1{}}
	names := make([]string, 0, len(p.Traits))
	for k := range p.Traits {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		vals := p.Traits[k]
		if len(vals) > maxTraitValues {
			return nil, fmt.Errorf("trait %s has %d values, at most %d are allowed", k, len(vals), maxTraitValues)
		}
		v.Traits = append(v.Traits, traitASN1{Name: k, Values: append([]string{}, vals...)})
	}
	der, err := asn1.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode principal extension: %w", err)
	}
	if len(der) > maxExtensionBytes {
		return nil, fmt.Errorf("principal extension is %d bytes, at most %d are allowed", len(der), maxExtensionBytes)
	}
	return der, nil
}

// DecodePrincipal parses the DER value of the principal extension.
func DecodePrincipal(der []byte) (identity.Principal, error) {
	var zero identity.Principal
	if len(der) > maxExtensionBytes {
		return zero, fmt.Errorf("%w: %d bytes is over the %d-byte limit", ErrBadExtension, len(der), maxExtensionBytes)
	}
	var v principalASN1
	rest, err := asn1.Unmarshal(der, &v)
	if err != nil {
		return zero, fmt.Errorf("%w: %v", ErrBadExtension, err)
	}
	if len(rest) != 0 {
		return zero, fmt.Errorf("%w: %d trailing bytes", ErrBadExtension, len(rest))
	}
	if v.Version != PrincipalVersion {
		return zero, fmt.Errorf("%w: principal version %d, this proxy reads version %d (run limen login again)", ErrBadExtension, v.Version, PrincipalVersion)
	}
	if len(v.Traits) > maxTraits {
		return zero, fmt.Errorf("%w: %d traits", ErrBadExtension, len(v.Traits))
	}
	p := identity.Principal{Kind: identity.Kind(v.Kind), Name: v.Name, Issuer: v.Issuer, ClientID: v.ClientID, LoginID: v.LoginID}
	if len(v.Traits) > 0 {
		p.Traits = make(map[string][]string, len(v.Traits))
	}
	for _, t := range v.Traits {
		if _, dup := p.Traits[t.Name]; dup {
			return zero, fmt.Errorf("%w: trait %q appears twice", ErrBadExtension, t.Name)
		}
		if len(t.Values) > maxTraitValues {
			return zero, fmt.Errorf("%w: trait %q has %d values", ErrBadExtension, t.Name, len(t.Values))
		}
		p.Traits[t.Name] = append([]string{}, t.Values...)
	}
	if err := p.Validate(); err != nil {
		return zero, fmt.Errorf("%w: %v", ErrBadExtension, err)
	}
	if p.ClientID != "" {
		// Empty decodes (the kube path refuses it: no client, nothing);
		// anything else must name exactly one client.
		if err := identity.ValidClient(p.ClientID); err != nil {
			return zero, fmt.Errorf("%w: client: %v", ErrBadExtension, err)
		}
	}
	if err := validOptional(p.LoginID); err != nil {
		return zero, fmt.Errorf("%w: login id: %v", ErrBadExtension, err)
	}
	return p, nil
}

func validOptional(s string) error {
	if s == "" {
		return nil
	}
	return identity.ValidName(s)
}

// EncodeWorkerCluster returns the DER value of the worker extension.
func EncodeWorkerCluster(cluster string) ([]byte, error) {
	if err := ValidClusterName(cluster); err != nil {
		return nil, err
	}
	return asn1.Marshal(workerASN1{Version: ExtensionVersion, Cluster: cluster})
}

// DecodeWorkerCluster parses the DER value of the worker extension and
// returns the cluster the certificate is bound to.
func DecodeWorkerCluster(der []byte) (string, error) {
	if len(der) > maxExtensionBytes {
		return "", fmt.Errorf("%w: %d bytes", ErrBadExtension, len(der))
	}
	var v workerASN1
	rest, err := asn1.Unmarshal(der, &v)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadExtension, err)
	}
	if len(rest) != 0 {
		return "", fmt.Errorf("%w: %d trailing bytes", ErrBadExtension, len(rest))
	}
	if v.Version != ExtensionVersion {
		return "", fmt.Errorf("%w: version %d, this proxy reads version %d", ErrBadExtension, v.Version, ExtensionVersion)
	}
	if err := ValidClusterName(v.Cluster); err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadExtension, err)
	}
	return v.Cluster, nil
}

// ValidClusterName checks a cluster name: a DNS label (kpath.ValidCluster).
// The name is a segment of /k8s/CLUSTER, a file name, and the first label
// of the server name CLUSTER.kube.PROXY that routes to it, so one rule
// serves all three; a name the proxy could not route is refused here,
// where a worker is enrolled or a kubeconfig written, not at the first
// request.
func ValidClusterName(s string) error { return kpath.ValidCluster(s) }
