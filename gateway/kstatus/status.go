package kstatus

import (
	"encoding/json"
	"net/http"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Refusal is the response either hop gives when it answers a request itself:
// a Kubernetes Status, so kubectl prints the message as it prints the API
// server's own errors, and the same message as a Warning header.
func Refusal(code int, msg string) (http.Header, []byte) {
	return RefusalReason(code, "", msg)
}

// RefusalReason is Refusal with its own Status reason, so that a client can
// tell Limen's refusal from the API server's (kubectl prints it in
// "Error from server (REASON)"); "" takes the code's usual reason.
func RefusalReason(code int, reason, msg string) (http.Header, []byte) {
	r := metav1.StatusReason(reason)
	if r == "" {
		r = reasonFor(code)
	}
	body, _ := json.Marshal(metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Message: msg, Code: int32(code),
		Reason: r,
	})
	h := http.Header{
		"Content-Type":           {"application/json"},
		"X-Content-Type-Options": {"nosniff"},
		"Warning":                {Warning(msg)},
	}
	return h, append(body, '\n')
}

func reasonFor(code int) metav1.StatusReason {
	switch code {
	case http.StatusBadRequest:
		return metav1.StatusReasonBadRequest
	case http.StatusUnauthorized:
		return metav1.StatusReasonUnauthorized
	case http.StatusForbidden:
		return metav1.StatusReasonForbidden
	case http.StatusNotFound:
		return metav1.StatusReasonNotFound
	case http.StatusServiceUnavailable:
		return metav1.StatusReasonServiceUnavailable
	}
	return metav1.StatusReasonInternalError
}

// Warning formats msg as a Warning header value the way the API server
// sends them (code 299, no agent). kubectl prints Warning headers even for
// responses whose body it cannot decode, such as a refused discovery request,
// so a refusal's reason always reaches the user.
func Warning(msg string) string {
	clean := strings.Map(func(r rune) rune {
		switch {
		case r == '"' || r == '\\':
			return '\''
		case r < 0x20 || r > 0x7e:
			return ' '
		}
		return r
	}, msg)
	return `299 - "` + clean + `"`
}
