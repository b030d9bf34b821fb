package load

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limenhq/limen/test/gatewaytest"
)

// ReportEnv names the file the failure scenarios append their figures to;
// unset, bin/chaos-report.md at the repository's root. `make chaos` empties
// it first.
const ReportEnv = "CHAOS_REPORT"

var reportMu sync.Mutex

// Figures logs a scenario's figures on t and appends them to the report
// file (ReportEnv) as a Markdown section with the time, the commit and the
// load average, for docs/RELIABILITY.md. A report that cannot be written
// is logged, not a failure: the figures are in the test's log.
func Figures(t testing.TB, scenario string, lines ...string) {
	t.Helper()
	t.Logf("figures: %s\n  %s", scenario, strings.Join(lines, "\n  "))
	if err := AppendReport(scenario, lines...); err != nil {
		t.Logf("chaos report: %v", err)
	}
}

// AppendReport appends one scenario's section to the report file.
func AppendReport(scenario string, lines ...string) error {
	path, err := ReportPath()
	if err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n### %s\n\n", scenario)
	fmt.Fprintf(&b, "%s, commit %s, load average %s\n\n", time.Now().UTC().Format(time.RFC3339), commit(), LoadAverage())
	for _, l := range lines {
		fmt.Fprintf(&b, "- %s\n", l)
	}
	reportMu.Lock()
	defer reportMu.Unlock()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ReportPath is the report file: $CHAOS_REPORT, or bin/chaos-report.md at
// the repository's root.
func ReportPath() (string, error) {
	if p := os.Getenv(ReportEnv); p != "" {
		return p, nil
	}
	root, err := gatewaytest.RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin", "chaos-report.md"), nil
}

// LoadAverage is the first three fields of /proc/loadavg, or "unknown".
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func commit() string {
	root, err := gatewaytest.RepoRoot()
	if err != nil {
		return "unknown"
	}
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}
