package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// PolicyResult is one line of the policy package's Go benchmark.
type PolicyResult struct {
	Name     string  // "BenchmarkGroups/uncached", without the -GOMAXPROCS suffix
	NsPerOp  float64 // wall time
	CPUNsOp  float64 // process CPU time, when the benchmark reports it (0 otherwise)
	AllocsOp float64
}

// PolicyBenchCommand returns the command PolicyBench runs, for the report.
func PolicyBenchCommand() []string {
	return []string{"go", "test", "-run", "^$", "-bench", "BenchmarkGroups", "./gateway/policy/"}
}

// PolicyBench runs the policy decision benchmark in the repository at root
// and parses its results.
func PolicyBench(ctx context.Context, root string) ([]PolicyResult, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	argv := PolicyBenchCommand()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", strings.Join(argv, " "), err, out)
	}
	res := ParseBenchOutput(out)
	if len(res) == 0 {
		return nil, fmt.Errorf("%s printed no benchmark lines:\n%s", strings.Join(argv, " "), out)
	}
	return res, nil
}

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// ParseBenchOutput reads the result lines of `go test -bench` output.
func ParseBenchOutput(out []byte) []PolicyResult {
	var res []PolicyResult
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		r := PolicyResult{Name: m[1]}
		f := strings.Fields(m[2])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				r.NsPerOp = v
			case "cpu-ns/op":
				r.CPUNsOp = v
			case "allocs/op":
				r.AllocsOp = v
			}
		}
		if r.NsPerOp > 0 {
			res = append(res, r)
		}
	}
	return res
}
