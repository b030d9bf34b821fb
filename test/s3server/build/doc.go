// Package build pins the S3-compatible server the tests store recordings in:
// versitygw (github.com/versity/versitygw, Apache-2.0) with its POSIX
// backend. It lives in its own module, like tools/ does for Helm, so that
// versitygw's dependencies never move Limen's go.mod; test/s3server builds
// its cmd/versitygw from here once per version and caches the binary.
package build
