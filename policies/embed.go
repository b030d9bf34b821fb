// Package policies embeds Limen's default Rego policy (the *.rego files in
// this directory) so that the binary works without a bundle service. The
// default data is embedded by package bundles (bundles/example/data.json);
// gateway/policy combines the two into the default bundle.
package policies

import (
	"embed"
	"io/fs"
)

//go:embed *.rego
var rego embed.FS

// FS returns the embedded Rego files, named as in this directory.
func FS() fs.FS { return rego }
