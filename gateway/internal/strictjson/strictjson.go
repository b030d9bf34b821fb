// Package strictjson decodes the JSON Limen receives from another process
// (grants, request preambles, audit events on the wire) the one strict
// way: one value, no unknown field, nothing after it.
package strictjson

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Unmarshal decodes b into v, refusing unknown fields and any byte after
// the value, trailing white space included.
func Unmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if rest := int64(len(b)) - dec.InputOffset(); rest != 0 {
		return fmt.Errorf("%d trailing bytes after the value", rest)
	}
	return nil
}
