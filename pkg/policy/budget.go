package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"corral.dev/pkg/model"
)

// Limits caps what a session, or a user or tenant in a day, may spend.
// A zero field sets no cap (or, in a tenant's budgets, keeps the global one).
type Limits struct {
	// Steps counts model turns.
	Steps int `yaml:"steps" json:"steps,omitempty"`
	// Tokens counts input and output tokens together.
	Tokens int64 `yaml:"tokens" json:"tokens,omitempty"`
	// CostUSD is what the tokens cost, by the price table.
	CostUSD float64 `yaml:"cost_usd" json:"cost_usd,omitempty"`
	// SandboxSeconds is how long the session's calls ran in sandboxes.
	SandboxSeconds float64 `yaml:"sandbox_seconds" json:"sandbox_seconds,omitempty"`
	// WallTime is how long a session may work on one request (sessions
	// only).
	WallTime time.Duration `yaml:"wall_time" json:"-"`
}

// limitsJSON is Limits as JSON writes it: the wall time as a Go duration.
type limitsJSON struct {
	Steps          int     `json:"steps,omitempty"`
	Tokens         int64   `json:"tokens,omitempty"`
	CostUSD        float64 `json:"cost_usd,omitempty"`
	SandboxSeconds float64 `json:"sandbox_seconds,omitempty"`
	WallTime       string  `json:"wall_time,omitempty"`
}

// MarshalJSON writes l with its wall time as a duration ("2h0m0s").
func (l Limits) MarshalJSON() ([]byte, error) {
	j := limitsJSON{Steps: l.Steps, Tokens: l.Tokens, CostUSD: l.CostUSD, SandboxSeconds: l.SandboxSeconds}
	if l.WallTime != 0 {
		j.WallTime = l.WallTime.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes, refusing unknown fields and
// negative caps.
func (l *Limits) UnmarshalJSON(data []byte) error {
	var j limitsJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return fmt.Errorf("limits: %w", err)
	}
	*l = Limits{Steps: j.Steps, Tokens: j.Tokens, CostUSD: j.CostUSD, SandboxSeconds: j.SandboxSeconds}
	if j.WallTime != "" {
		d, err := time.ParseDuration(j.WallTime)
		if err != nil {
			return fmt.Errorf("limits: wall_time: %w", err)
		}
		l.WallTime = d
	}
	return l.check("limits")
}

// Raise returns l with every cap r sets in place of l's.
func (l Limits) Raise(r Limits) Limits { return r.orElse(l) }

// Lower returns l with every cap r sets below l's (or that l does not
// set) in place of l's: r can tighten l, never loosen it.
func (l Limits) Lower(r Limits) Limits {
	return Limits{
		Steps:          tighter(l.Steps, r.Steps),
		Tokens:         tighter(l.Tokens, r.Tokens),
		CostUSD:        tighter(l.CostUSD, r.CostUSD),
		SandboxSeconds: tighter(l.SandboxSeconds, r.SandboxSeconds),
		WallTime:       tighter(l.WallTime, r.WallTime),
	}
}

// tighter is the tighter of two caps, where 0 is none.
func tighter[T ~int | ~int64 | ~float64](a, b T) T {
	if b > 0 && (a == 0 || b < a) {
		return b
	}
	return a
}

// Budgets are the caps of a tenant's sessions, of each of its users per
// day and of the whole tenant per day (days in UTC).
type Budgets struct {
	Session     Limits `yaml:"session"`
	UserDaily   Limits `yaml:"user_daily"`
	TenantDaily Limits `yaml:"tenant_daily"`
}

// Price is what a model charges, in USD per million tokens: input tokens
// read from the provider's prompt cache at CacheRead, those written to it
// at CacheWrite (CacheWriteLong for those written with the longer
// lifetime), the other input tokens at Input. A cache price left out is
// Input's (CacheWriteLong's is CacheWrite's): an unknown discount is not
// assumed.
type Price struct {
	Input          float64  `yaml:"input"`
	Output         float64  `yaml:"output"`
	CacheRead      *float64 `yaml:"cache_read"`
	CacheWrite     *float64 `yaml:"cache_write"`
	CacheWriteLong *float64 `yaml:"cache_write_1h"`
}

// Usage is what a session, or a user or tenant in a day, has spent.
type Usage struct {
	Steps        int   `json:"steps"`
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	// CacheReadTokens and CacheWriteTokens are those of InputTokens read
	// from the providers' prompt caches and written to them.
	CacheReadTokens  int64   `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int64   `json:"cache_write_tokens,omitempty"`
	CostUSD          float64 `json:"cost_usd"`
	SandboxSeconds   float64 `json:"sandbox_seconds"`
}

// Add adds u2 to u.
func (u *Usage) Add(u2 Usage) {
	u.Steps += u2.Steps
	u.InputTokens += u2.InputTokens
	u.OutputTokens += u2.OutputTokens
	u.CacheReadTokens += u2.CacheReadTokens
	u.CacheWriteTokens += u2.CacheWriteTokens
	u.CostUSD += u2.CostUSD
	u.SandboxSeconds += u2.SandboxSeconds
}

// Over returns the first cap of l that u (with wall time elapsed) has
// reached, as "steps", "tokens", "cost_usd", "sandbox_seconds" or
// "wall_time", with what was spent against it; "" when none is.
func (l Limits) Over(u Usage, elapsed time.Duration) (limit, spent string) {
	switch {
	case l.Steps > 0 && u.Steps >= l.Steps:
		return "steps", fmt.Sprintf("%d of %d steps", u.Steps, l.Steps)
	case l.Tokens > 0 && u.InputTokens+u.OutputTokens >= l.Tokens:
		return "tokens", fmt.Sprintf("%d of %d tokens", u.InputTokens+u.OutputTokens, l.Tokens)
	case l.CostUSD > 0 && u.CostUSD >= l.CostUSD:
		return "cost_usd", fmt.Sprintf("$%.4f of $%.2f", u.CostUSD, l.CostUSD)
	case l.SandboxSeconds > 0 && u.SandboxSeconds >= l.SandboxSeconds:
		return "sandbox_seconds", fmt.Sprintf("%.1f of %.0f sandbox seconds", u.SandboxSeconds, l.SandboxSeconds)
	case l.WallTime > 0 && elapsed >= l.WallTime:
		return "wall_time", fmt.Sprintf("%s of %s", elapsed.Round(time.Second), l.WallTime)
	}
	return "", ""
}

func (l Limits) orElse(d Limits) Limits {
	if l.Steps == 0 {
		l.Steps = d.Steps
	}
	if l.Tokens == 0 {
		l.Tokens = d.Tokens
	}
	if l.CostUSD == 0 {
		l.CostUSD = d.CostUSD
	}
	if l.SandboxSeconds == 0 {
		l.SandboxSeconds = d.SandboxSeconds
	}
	if l.WallTime == 0 {
		l.WallTime = d.WallTime
	}
	return l
}

func (l Limits) check(where string) error {
	if l.Steps < 0 || l.Tokens < 0 || l.CostUSD < 0 || l.SandboxSeconds < 0 || l.WallTime < 0 {
		return fmt.Errorf("policy: %s: a budget cannot be negative", where)
	}
	// A NaN cap would be no cap (no spending ever reaches it); no cap is 0.
	if !finite(l.CostUSD) || !finite(l.SandboxSeconds) {
		return fmt.Errorf("policy: %s: a budget must be a finite number (0 for none)", where)
	}
	return nil
}

// finite reports whether f is neither infinite nor NaN.
func finite(f float64) bool { return !math.IsInf(f, 0) && !math.IsNaN(f) }

// Budgets returns tenant's budgets: its own, field by field, over the
// global ones.
func (p *Policy) Budgets(tenant string) Budgets {
	b := p.budgets
	if t, ok := p.tenantBudgets[tenant]; ok {
		b = Budgets{
			Session:     t.Session.orElse(b.Session),
			UserDaily:   t.UserDaily.orElse(b.UserDaily),
			TenantDaily: t.TenantDaily.orElse(b.TenantDaily),
		}
	}
	return b
}

// Priced reports whether the price table prices modelName, itself or by
// its "*" entry: only then can a cap of cost ever be reached.
func (p *Policy) Priced(modelName string) bool {
	pr, ok := p.prices[modelName]
	if !ok {
		pr = p.prices["*"]
	}
	return pr.Input > 0 || pr.Output > 0
}

// Cost returns what usage cost on modelName ("openai:gpt-4.1"), by the
// price table: the model's entry, or the "*" entry, or nothing.
func (p *Policy) Cost(modelName string, usage model.Usage) float64 {
	pr, ok := p.prices[modelName]
	if !ok {
		pr = p.prices["*"]
	}
	read, write := pr.Input, pr.Input
	if pr.CacheRead != nil {
		read = *pr.CacheRead
	}
	if pr.CacheWrite != nil {
		write = *pr.CacheWrite
	}
	long := write
	if pr.CacheWriteLong != nil {
		long = *pr.CacheWriteLong
	}
	longTokens := min(usage.CacheWriteLongTokens, usage.CacheWriteTokens)
	cached := usage.CacheReadTokens + usage.CacheWriteTokens
	plain := max(usage.InputTokens-cached, 0)
	return (float64(plain)*pr.Input + float64(usage.CacheReadTokens)*read + float64(usage.CacheWriteTokens-longTokens)*write +
		float64(longTokens)*long + float64(usage.OutputTokens)*pr.Output) / 1e6
}
