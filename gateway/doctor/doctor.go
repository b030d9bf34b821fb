// Package doctor holds the checks of `limen doctor`: each looks at one part
// of a user's or an operator's setup and says what it found, whether that is
// fine, and, when it is not, what to do. User runs a user's checks against
// their proxy; Proxy and Worker run an operator's on the proxy's or the
// worker's host, from its data directory.
package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// Status is a check's verdict.
type Status string

// The verdicts. Only Fail makes `limen doctor` exit non-zero; Skip marks a
// check that could not run because one it depends on failed.
const (
	OK   Status = "ok"
	Warn Status = "warn"
	Fail Status = "FAIL"
	Skip Status = "skip"
)

// Result is one check's line.
type Result struct {
	// Check names what was checked ("proxy", "cluster prod", …).
	Check  string `json:"check"`
	Status Status `json:"status"`
	// Found says what the check saw.
	Found string `json:"found"`
	// Fix says what to do; set for every Warn and Fail.
	Fix string `json:"fix,omitempty"`
}

func ok(check, format string, a ...any) Result {
	return Result{Check: check, Status: OK, Found: fmt.Sprintf(format, a...)}
}

func warn(check, found, fix string) Result {
	return Result{Check: check, Status: Warn, Found: found, Fix: fix}
}

func fail(check, found, fix string) Result {
	return Result{Check: check, Status: Fail, Found: found, Fix: fix}
}

func skip(check, why string) Result { return Result{Check: check, Status: Skip, Found: why} }

// Report is the results of a run, in the order the checks ran.
type Report []Result

// Failed counts the checks that failed.
func (r Report) Failed() int {
	n := 0
	for _, res := range r {
		if res.Status == Fail {
			n++
		}
	}
	return n
}

// Write prints one line per check: verdict, check, what was found and,
// after "->", what to do.
func (r Report) Write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, res := range r {
		line := res.Found
		if res.Fix != "" {
			line += " -> " + res.Fix
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", res.Status, res.Check, line)
	}
	return tw.Flush()
}

// WriteJSON prints the report as {"failed": N, "checks": [...]}.
func (r Report) WriteJSON(w io.Writer) error {
	if r == nil {
		r = Report{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Failed int    `json:"failed"`
		Checks Report `json:"checks"`
	}{r.Failed(), r})
}

// left words the time from now to t, rounded for reading: "11h59m", "4m10s".
func left(now, t time.Time) string {
	d := t.Sub(now)
	switch {
	case d >= time.Hour:
		d = d.Round(time.Minute)
	default:
		d = d.Round(time.Second)
	}
	return d.String()
}

// stamp is t in UTC, RFC 3339.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
