package harness

import (
	"fmt"
	"slices"
	"strings"
)

// Speedups are what makes a step cheap, each in one place behind the
// session core: switching one off changes no outcome, only the work a
// step does, which the tests show by running with none
// (CORRAL_HARNESS_SPEEDUPS=none).
type Speedups struct {
	// FoldCache starts a step from the state the session's last step here
	// kept, reading only the events stored since (session.go: load, keep).
	FoldCache bool
	// Follower folds in a step's trigger, a tool result recorded right
	// after that state, without reading the log (session.go: follower).
	Follower bool
	// ConditionalAppend records the step's events on the condition that
	// the log ends where its state was folded to, so that the state
	// stands for the log without reading it back (session.go: appendNew).
	ConditionalAppend bool
	// Linger keeps a running session's lease after its step, for its next
	// step here to take without a write (lease.go).
	Linger bool
}

// speedupNames are the names of the speed-ups in CORRAL_HARNESS_SPEEDUPS.
var speedupNames = []string{"fold-cache", "follower", "conditional-append", "linger"}

// parseSpeedups reads CORRAL_HARNESS_SPEEDUPS: "all" (or unset), "none",
// or the names of those to use, separated by commas.
func parseSpeedups(s string) (Speedups, error) {
	on := map[string]bool{}
	switch s = strings.TrimSpace(s); s {
	case "", "all":
		for _, n := range speedupNames {
			on[n] = true
		}
	case "none":
	default:
		for n := range strings.SplitSeq(s, ",") {
			n = strings.TrimSpace(n)
			if !slices.Contains(speedupNames, n) {
				return Speedups{}, fmt.Errorf("CORRAL_HARNESS_SPEEDUPS=%q: %q is not one of all, none, %s", s, n, strings.Join(speedupNames, ", "))
			}
			on[n] = true
		}
	}
	return Speedups{
		FoldCache:         on["fold-cache"],
		Follower:          on["follower"],
		ConditionalAppend: on["conditional-append"],
		Linger:            on["linger"],
	}, nil
}
