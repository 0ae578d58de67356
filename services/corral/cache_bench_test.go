package main

import (
	"fmt"
	"testing"

	"corral.dev/pkg/event"
	"corral.dev/pkg/modeltest"
)

// BenchmarkPromptCache reports what the input of a 30-turn session is
// billed on each wire, the fakes billing cached prompts as the providers
// do (cached), next to what the same input costs with nothing cached
// (uncached: every input token at the input price), and the first as a
// share of the second: Anthropic's prices (cache reads at a tenth of
// input, writes at 1.25×), OpenAI's gpt-5 (cached input at a tenth; gpt-4.1
// bills it at a quarter, which bounds its saving at 75%). Each op is one
// session.
func BenchmarkPromptCache(b *testing.B) {
	const turns = 30
	prices := map[string][3]float64{ // input, cache read, cache write
		"anthropic:claude-bench": {3, 0.3, 3.75},
		"openai:gpt-bench":       {1.25, 0.125, 1.25}, // gpt-5's: no write surcharge
	}
	for m, pr := range prices {
		b.Run(m, func(b *testing.B) {
			billed := func() (cached, uncached float64) {
				p := startDev(b, func(c modeltest.Conversation) (modeltest.Turn, error) {
					if n := modeltest.Turns(c); n < turns-1 {
						return modeltest.Turn{Text: fmt.Sprint("step ", n), Calls: []modeltest.Call{bash(fmt.Sprintf("echo turn %d", n))}}, nil
					}
					return modeltest.Turn{Text: "counted"}, nil
				}, map[string]string{"CORRAL_POLICY_FILE": writeTemp(b, "rules: []\n")})
				code, _, stderr := p.corral(b, "run", "--model", m, "--tenant", "bench", "--user", "bench", "count the turns")
				if code != 0 {
					b.Fatalf("corral run exited %d:\n%s", code, stderr)
				}
				for _, ev := range p.events(b, sessionOf(b, stderr)) {
					if r, ok := ev.(*event.ModelResponded); ok {
						u := r.Usage
						plain := u.InputTokens - u.CacheReadTokens - u.CacheWriteTokens
						cached += (float64(plain)*pr[0] + float64(u.CacheReadTokens)*pr[1] + float64(u.CacheWriteTokens)*pr[2]) / 1e6
						uncached += float64(u.InputTokens) * pr[0] / 1e6
					}
				}
				return cached, uncached
			}
			var cached, uncached float64
			for range b.N {
				c, u := billed()
				cached, uncached = cached+c, uncached+u
			}
			b.ReportMetric(cached/float64(b.N), "cached-usd")
			b.ReportMetric(uncached/float64(b.N), "uncached-usd")
			b.ReportMetric(100*cached/uncached, "cached-%")
		})
	}
}
