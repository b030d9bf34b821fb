package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// stale matches words that say a help text describes something Limen does
// not do yet, or a note its author left for later.
var stale = regexp.MustCompile(`(?i)\(later\)|\blater\)|\btodo\b|\bfixme\b|\bxxx\b|\btbd\b|not (yet )?implemented|coming soon|placeholder`)

// TestHelpDescribesEveryCommand walks the whole command tree, as limen
// --help and each subcommand's --help show it. The rule: every command has
// a one-line Short (no trailing full stop, as cobra lists it) and a Long
// that says more than the Short does (what it does, where it runs, what it
// needs), every flag has a usage line, and no Short, Long, Example or flag
// usage says "(later)", "TODO" or the like: help describes what the command
// does today.
func TestHelpDescribesEveryCommand(t *testing.T) {
	n := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		n++
		path := c.CommandPath()
		short, long := strings.TrimSpace(c.Short), strings.TrimSpace(c.Long)
		switch {
		case short == "":
			t.Errorf("%s: no Short", path)
		case strings.HasSuffix(short, "."):
			t.Errorf("%s: Short %q ends with a full stop", path, short)
		}
		if long == "" || long == short {
			t.Errorf("%s: no Long beyond its Short %q: say what it does, where it runs and what it needs", path, short)
		}
		for what, text := range map[string]string{"Short": c.Short, "Long": c.Long, "Example": c.Example} {
			if m := stale.FindString(text); m != "" {
				t.Errorf("%s: %s says %q: describe what the command does today", path, what, m)
			}
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if strings.TrimSpace(f.Usage) == "" {
				t.Errorf("%s --%s: no usage", path, f.Name)
			}
			if m := stale.FindString(f.Usage); m != "" {
				t.Errorf("%s --%s says %q: describe what the flag does today", path, f.Name, m)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	root := newRootCmd()
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	walk(root)
	if n < 40 {
		t.Fatalf("walked %d commands; the tree has more than 40", n)
	}
}
