//go:build tools

package build

import _ "github.com/versity/versitygw/cmd/versitygw"
