// Package bundles holds the example policy data that Limen embeds as its
// default bundle (together with the Rego in package policies), and the
// inputs of `make bundle`.
package bundles

import _ "embed"

//go:embed example/data.json
var exampleData []byte

// ExampleData returns bundles/example/data.json: the data of the embedded
// default bundle. The returned slice is a copy; callers may keep it.
func ExampleData() []byte { return append([]byte(nil), exampleData...) }
