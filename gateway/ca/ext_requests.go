package ca

import (
	"crypto/x509"
	"encoding/asn1"
	"fmt"
	"time"

	"github.com/limenhq/limen/gateway/identity"
)

// OIDRequests is the extension of a certificate issued for approved access
// requests (docs/ACCESS-REQUESTS.md): the DER encoding of
//
//	LimenRequests ::= SEQUENCE {
//	    version   INTEGER (1),
//	    requests  SEQUENCE OF Request
//	}
//	Request ::= SEQUENCE { id UTF8String, role UTF8String, cluster UTF8String, expires GeneralizedTime }
//
// Non-critical like the principal extension. The proxy trusts it only as
// far as its store confirms each request on every use.
var OIDRequests = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 64297, 1, 3}

// RequestsVersion is the only version of the requests extension.
const RequestsVersion = 1

type requestsASN1 struct {
	Version  int
	Requests []requestASN1
}

type requestASN1 struct {
	ID      string    `asn1:"utf8"`
	Role    string    `asn1:"utf8"`
	Cluster string    `asn1:"utf8"`
	Expires time.Time `asn1:"generalized"`
}

// EncodeRequests returns the DER value of the requests extension.
func EncodeRequests(es []identity.Elevation) ([]byte, error) {
	if len(es) > identity.MaxElevations {
		return nil, fmt.Errorf("%d access requests, at most %d are allowed", len(es), identity.MaxElevations)
	}
	v := requestsASN1{Version: RequestsVersion, Requests: []requestASN1{}}
	for _, e := range es {
		if err := e.Validate(); err != nil {
			return nil, err
		}
		v.Requests = append(v.Requests, requestASN1{ID: e.Request, Role: e.Role, Cluster: e.Cluster, Expires: e.Expires.UTC().Truncate(time.Second)})
	}
	return asn1.Marshal(v)
}

// DecodeRequests parses the DER value of the requests extension.
func DecodeRequests(der []byte) ([]identity.Elevation, error) {
	if len(der) > maxExtensionBytes {
		return nil, fmt.Errorf("%w: requests: %d bytes", ErrBadExtension, len(der))
	}
	var v requestsASN1
	rest, err := asn1.Unmarshal(der, &v)
	if err != nil {
		return nil, fmt.Errorf("%w: requests: %v", ErrBadExtension, err)
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: requests: %d trailing bytes", ErrBadExtension, len(rest))
	}
	if v.Version != RequestsVersion {
		return nil, fmt.Errorf("%w: requests version %d, this proxy reads version %d", ErrBadExtension, v.Version, RequestsVersion)
	}
	if len(v.Requests) > identity.MaxElevations {
		return nil, fmt.Errorf("%w: %d access requests", ErrBadExtension, len(v.Requests))
	}
	out := make([]identity.Elevation, 0, len(v.Requests))
	for _, r := range v.Requests {
		e := identity.Elevation{Request: r.ID, Role: r.Role, Cluster: r.Cluster, Expires: r.Expires.UTC()}
		if err := e.Validate(); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadExtension, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// requestsOf reads leaf's requests extension; none when it has none.
func requestsOf(leaf *x509.Certificate) ([]identity.Elevation, error) {
	n := 0
	for _, e := range leaf.Extensions {
		if e.Id.Equal(OIDRequests) {
			n++
		}
	}
	if n == 0 {
		return nil, nil
	}
	der, err := extension(leaf, OIDRequests.String())
	if err != nil {
		return nil, err
	}
	return DecodeRequests(der)
}
