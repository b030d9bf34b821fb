package auditexport

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// Decoding as a receiver does: with the API server's own scheme and a
// strict serializer, so that a field the audit.k8s.io/v1 types do not
// have, a duplicate field or a wrong kind is an error. The tests decode
// every exported event through these; an operator's tooling may too.

var strict = func() runtime.Decoder {
	scheme := runtime.NewScheme()
	if err := auditv1.AddToScheme(scheme); err != nil {
		panic(err) // the API server's own registration; cannot fail
	}
	return kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme, scheme, kjson.SerializerOptions{Strict: true})
}()

// DecodeEvent decodes one exported JSON line as an audit.k8s.io/v1 Event,
// strictly.
func DecodeEvent(data []byte) (*auditv1.Event, error) {
	obj, _, err := strict.Decode(data, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("decode audit event: %w", err)
	}
	e, ok := obj.(*auditv1.Event)
	if !ok {
		return nil, fmt.Errorf("decode audit event: got %T, want an audit.k8s.io/v1 Event", obj)
	}
	return e, nil
}

// DecodeEventList decodes one webhook body as an audit.k8s.io/v1
// EventList, strictly.
func DecodeEventList(data []byte) (*auditv1.EventList, error) {
	obj, _, err := strict.Decode(data, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("decode audit event list: %w", err)
	}
	l, ok := obj.(*auditv1.EventList)
	if !ok {
		return nil, fmt.Errorf("decode audit event list: got %T, want an audit.k8s.io/v1 EventList", obj)
	}
	if l.Items == nil {
		return nil, errors.New("decode audit event list: no items")
	}
	return l, nil
}
