// Package bytesize words byte counts for people, the one way every size
// limit and its use are shown (recording caps, the spool, the recording
// store, the audit database).
package bytesize

import "fmt"

// Format writes n for people: "1 GiB", "64 KiB", "1500 bytes"; the binary
// unit is used only when it is exact.
func Format(n int64) string {
	for _, u := range units {
		if n > 0 && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %s", n>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// Approx writes n rounded to one decimal in the largest binary unit it
// reaches ("1.4 GiB", "812 bytes"), for use that is never exact.
func Approx(n int64) string {
	for _, u := range units {
		if n >= 1<<u.shift {
			return fmt.Sprintf("%.1f %s", float64(n)/float64(int64(1)<<u.shift), u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

var units = []struct {
	shift uint
	name  string
}{{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}}

// Percent is used as a share of limit, in whole percent, rounded down.
func Percent(used, limit int64) int64 {
	if limit <= 0 {
		return 0
	}
	return int64(float64(used) / float64(limit) * 100)
}
