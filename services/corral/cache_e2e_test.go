package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"corral.dev/pkg/event"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/natstest"
)

// A 30-turn session on each wire: from its second turn on, at least 90%
// of its input tokens are read from the provider's prompt cache, and what
// corral usage says it cost is what the price table makes of its usage,
// computed by hand.
func TestPromptCacheOverThirtyTurns(t *testing.T) {
	const turns = 30
	for _, m := range []string{"openai:gpt-test", "anthropic:claude-test"} {
		t.Run(strings.Split(m, ":")[0], func(t *testing.T) {
			policy := fmt.Sprintf("rules: []\nprices:\n  %q: {input: 30, output: 150, cache_read: 3, cache_write: 37.5}\n", m)
			p := startDev(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
				if n := modeltest.Turns(c); n < turns-1 {
					return modeltest.Turn{Text: fmt.Sprint("step ", n), Calls: []modeltest.Call{bash(fmt.Sprintf("echo turn %d", n))}}, nil
				}
				return modeltest.Turn{Text: "counted"}, nil
			}, map[string]string{"CORRAL_POLICY_FILE": writeTemp(t, policy)})
			code, _, stderr := p.corral(t, "run", "--model", m, "--tenant", "acme", "--user", "ada", "count the turns")
			if code != 0 {
				t.Fatalf("corral run exited %d:\n%s", code, stderr)
			}
			var input, read, n int
			var cost float64
			for _, ev := range p.events(t, sessionOf(t, stderr)) {
				r, ok := ev.(*event.ModelResponded)
				if !ok {
					continue
				}
				n++
				u := r.Usage
				plain := u.InputTokens - u.CacheReadTokens - u.CacheWriteTokens
				cost += (float64(plain)*30 + float64(u.CacheReadTokens)*3 + float64(u.CacheWriteTokens)*37.5 + float64(u.OutputTokens)*150) / 1e6
				if r.Turn >= 2 {
					input += u.InputTokens
					read += u.CacheReadTokens
				}
			}
			if n != turns {
				t.Fatalf("%d model turns, want %d", n, turns)
			}
			if share := float64(read) / float64(input); share < 0.9 {
				t.Errorf("turns 2 to %d read %d of %d input tokens from the cache (%.1f%%), want at least 90%%", turns, read, input, 100*share)
			}
			// The day's usage is counted a moment after it is spent.
			natstest.WaitFor(t, 30*time.Second, func() error {
				out := p.corralOK(t, "usage", "--tenant", "acme", "--user", "ada")
				for line := range strings.Lines(out) {
					f := strings.Fields(line)
					if len(f) < 9 || f[2] != "ada" {
						continue
					}
					if f[3] != strconv.Itoa(turns) {
						return fmt.Errorf("%s of %d steps counted", f[3], turns)
					}
					if hit := strings.TrimSuffix(f[5], "%"); hit == f[5] {
						t.Errorf("the cache hit column shows %q", f[5])
					}
					if billed, _ := strconv.ParseFloat(f[7], 64); math.Abs(billed-cost) > 0.0001 {
						t.Errorf("corral usage says the session cost $%.4f; by hand, $%.4f:\n%s", billed, cost, out)
					}
					return nil
				}
				return fmt.Errorf("no usage of ada yet:\n%s", out)
			})
		})
	}
}
