package policy

import (
	"math"
	"testing"

	"corral.dev/pkg/model"
)

// Cached input is priced at its own prices, or at the input's where the
// table gives none.
func TestCostOfCachedInput(t *testing.T) {
	p, err := Parse([]byte(`
rules: []
prices:
  "anthropic:m": {input: 10, output: 100, cache_read: 1, cache_write: 12.5, cache_write_1h: 20}
  "anthropic:short": {input: 10, output: 100, cache_read: 1, cache_write: 12.5}
  "openai:m": {input: 10, output: 100}
`))
	if err != nil {
		t.Fatal(err)
	}
	u := model.Usage{InputTokens: 1_000_000, CacheReadTokens: 600_000, CacheWriteTokens: 300_000, CacheWriteLongTokens: 100_000, OutputTokens: 10_000}
	for _, tc := range []struct {
		model string
		want  float64
	}{
		{"anthropic:m", 0.1*10 + 0.6*1 + 0.2*12.5 + 0.1*20 + 0.01*100},
		// The longer lifetime's writes, unpriced, cost the other writes'.
		{"anthropic:short", 0.1*10 + 0.6*1 + 0.3*12.5 + 0.01*100},
		{"openai:m", 1*10 + 0.01*100},
	} {
		if got := p.Cost(tc.model, u); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: $%v, want $%v", tc.model, got, tc.want)
		}
	}
}
