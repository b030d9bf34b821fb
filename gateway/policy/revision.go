package policy

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
)

// MaxRevisionDigits bounds a bundle revision: 20 digits hold any uint64.
const MaxRevisionDigits = 20

// ParseRevision reads a bundle revision. A revision is an unsigned decimal
// integer (0 … 18446744073709551615) written without sign, spaces or
// leading zeros, so that each number has exactly one spelling and "equal
// revision" means equal strings. Revisions are ordered as numbers: a bundle
// service may only move them forward (policies/README.md, "Revisions").
// `make bundle` writes the build time as YYYYMMDDhhmmss, which is such a
// number.
func ParseRevision(s string) (uint64, error) {
	switch {
	case s == "":
		return 0, fmt.Errorf("the bundle has no revision: build it with `opa build --revision N` (or `make bundle`), N an unsigned integer that grows with every bundle")
	case len(s) > MaxRevisionDigits:
		return 0, fmt.Errorf("revision %.24q… is longer than %d digits: use an unsigned integer below 2^64", s, MaxRevisionDigits)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("revision %q is not an unsigned decimal integer: Limen orders revisions as numbers (for example the build time 20250131235959, or a build counter)", s)
		}
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, fmt.Errorf("revision %q has a leading zero: write the number without it", s)
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("revision %q does not fit in 64 bits: use an unsigned integer below 2^64", s)
	}
	return n, nil
}

// mark is what the order check remembers of a bundle: its revision as a
// number and a digest of what it would activate.
type mark struct {
	revision string
	n        uint64
	digest   [sha256.Size]byte
}

// contentDigest hashes what a bundle activates: its modules (path and
// source) and its data. Two builds of the same policy and data digest the
// same even if their archives differ (gzip headers, file order), so
// re-serving a bundle is never mistaken for a forgery of its revision.
func contentDigest(sources map[string][]byte, data map[string]any) ([sha256.Size]byte, error) {
	h := sha256.New()
	for _, p := range slices.Sorted(maps.Keys(sources)) {
		fmt.Fprintf(h, "module %d:%s %d\n", len(p), p, len(sources[p]))
		h.Write(sources[p])
	}
	// encoding/json sorts object keys, so equal data marshals to equal bytes.
	b, err := json.Marshal(data)
	if err != nil {
		return [sha256.Size]byte{}, fmt.Errorf("data cannot be hashed: %w", err)
	}
	fmt.Fprintf(h, "data %d\n", len(b))
	h.Write(b)
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d, nil
}

// checkOrder decides whether c may follow floor, the newest revision this
// engine has seen verified (active, or persisted on disk). It returns
// same=true when c is exactly the bundle already known: nothing to do.
func checkOrder(floor *mark, c content) (same bool, err error) {
	if floor == nil {
		return false, nil
	}
	switch {
	case c.mark.n < floor.n:
		return false, &refusal{reason: ReasonRollback, revision: c.revision, err: fmt.Errorf(
			"%w: revision %s is older than revision %s, already activated or persisted: revisions only move forward; to undo a change, publish the old policy under a new, higher revision",
			ErrBundleRefused, c.revision, floor.revision)}
	case c.mark.n == floor.n && c.mark.digest != floor.digest:
		return false, &refusal{reason: ReasonSameRevision, revision: c.revision, err: fmt.Errorf(
			"%w: revision %s is already activated or persisted with other content: a replay or a forgery of the same number; publish every change under a new, higher revision",
			ErrBundleRefused, c.revision)}
	}
	return c.mark.n == floor.n, nil
}
