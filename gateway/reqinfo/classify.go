// Package reqinfo classifies a Kubernetes request the way the API server
// will (verb, group, resource, namespace, name), with the API server's own
// RequestInfoFactory, for both hops.
package reqinfo

import (
	"fmt"
	"net/http"
	"net/url"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/limenhq/limen/gateway/kpath"
)

// Info is a request as the API server's authorizer sees it (DESIGN.md §3).
type Info struct {
	// IsResourceRequest is false for discovery and other non-resource URLs,
	// whose Verb is then the lower-case HTTP method.
	IsResourceRequest bool   `json:"is_resource_request"`
	Verb              string `json:"verb"`
	APIGroup          string `json:"api_group,omitempty"`
	APIVersion        string `json:"api_version,omitempty"`
	Resource          string `json:"resource,omitempty"`
	Subresource       string `json:"subresource,omitempty"`
	Namespace         string `json:"namespace,omitempty"`
	Name              string `json:"name,omitempty"`
}

// Classify classifies r as the API server would, reading the path from p
// (never from r.URL.Path, so the classified path is the canonical one) and
// the query from r.URL.RawQuery (watch=true, fieldSelector=metadata.name=…).
// r is not modified.
func Classify(r *http.Request, p kpath.Path) (Info, error) {
	factory := request.RequestInfoFactory{
		APIPrefixes:          sets.NewString("api", "apis"),
		GrouplessAPIPrefixes: sets.NewString("api"),
	}
	u := &url.URL{RawQuery: r.URL.RawQuery}
	p.SetURL(u)
	shallow := *r
	shallow.URL = u
	ri, err := factory.NewRequestInfo(&shallow)
	if err != nil {
		return Info{}, fmt.Errorf("classify %s %s: %w", r.Method, p, err)
	}
	return Info{
		IsResourceRequest: ri.IsResourceRequest,
		Verb:              ri.Verb,
		APIGroup:          ri.APIGroup,
		APIVersion:        ri.APIVersion,
		Resource:          ri.Resource,
		Subresource:       ri.Subresource,
		Namespace:         ri.Namespace,
		Name:              ri.Name,
	}, nil
}
