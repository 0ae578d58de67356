package harness

import (
	"crypto/ed25519"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"corral.dev/pkg/envconf"
	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
	"corral.dev/pkg/modelinfo"
	"corral.dev/pkg/policy"
)

// Config is the harness's configuration, read from the environment by
// [LoadConfig].
type Config struct {
	// NATSURL is the NATS server to connect to (CORRAL_NATS_URL).
	NATSURL string
	// Instance names this harness in session leases.
	Instance string
	// DefaultModel is used when a request names none (CORRAL_MODEL).
	DefaultModel string
	// OpenAI and Anthropic configure the providers (OPENAI_API_KEY,
	// OPENAI_BASE_URL, ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL). A provider
	// with neither a key nor a base URL is not configured.
	// OPENAI_MAX_TOKENS_FIELD=max_tokens sends the older field for the
	// output limit, for compatible servers that know no other;
	// CORRAL_MODEL_STREAM=off asks both for whole responses.
	OpenAI, Anthropic model.Config
	// MaxTurns is how many model responses a session may take
	// (CORRAL_MAX_TURNS).
	MaxTurns int
	// MaxTokens is the output-token limit of each model call
	// (CORRAL_MAX_TOKENS).
	MaxTokens int
	// PromptCache asks the providers to cache each session's prompt
	// (CORRAL_PROMPT_CACHE, default on): its turns then bill the
	// conversation before the newest at the cache's price.
	PromptCache bool
	// CacheTTL is the lifetime asked of a session's cached prompt
	// (CORRAL_PROMPT_CACHE_TTL): "5m" the providers' default, "1h" their
	// longer one (Anthropic's one-hour breakpoints, written at a higher
	// price; OpenAI's extended retention), or "auto" (the default): the
	// longer one once the session has waited for a reviewer, whose
	// decision may take longer than the default lifetime.
	CacheTTL string
	// Concurrency is how many sessions one harness steps at once
	// (CORRAL_HARNESS_CONCURRENCY), TenantConcurrency how many of one
	// tenant's (CORRAL_HARNESS_TENANT_CONCURRENCY, default half of it).
	Concurrency, TenantConcurrency int
	// RetryDelay is the first redelivery delay of a failed step.
	RetryDelay time.Duration
	// ShutdownGrace is how long running steps may finish at shutdown
	// before they are cancelled and left for redelivery
	// (CORRAL_SHUTDOWN_GRACE, a Go duration).
	ShutdownGrace time.Duration
	// Policy decides which calls run, which need approval and which are
	// refused: the file CORRAL_POLICY_FILE, or deploy/policy.yaml (built
	// in).
	Policy *policy.Policy
	// ApprovalKey is the approval service's public key
	// (CORRAL_APPROVAL_PUBLIC_KEY, base64): a call the policy holds for
	// approval runs only on a decision it verifies. Without it, such calls
	// are refused.
	ApprovalKey ed25519.PublicKey
	// CallKey signs every tool call the harness puts on a queue
	// (CORRAL_CALL_SIGNING_KEY, the base64 seed, or
	// CORRAL_CALL_SIGNING_KEY_FILE): the tool services run only calls that
	// its public half (CORRAL_CALL_PUBLIC_KEY) verifies. Nil signs none,
	// for tests of the harness alone.
	CallKey ed25519.PrivateKey
	// Metrics is where the service's metrics are registered (none are
	// served when nil).
	Metrics prometheus.Registerer
	// Speedups are the speed-ups a step uses (CORRAL_HARNESS_SPEEDUPS).
	Speedups Speedups
	// Models is the model table: each model's context window, largest
	// output and capabilities. It is the built-in one, with the file
	// CORRAL_MODELS names laid over it.
	Models *modelinfo.Catalog
	// CompactThreshold is the share of a model's window (its output left
	// out) past which the next request's estimated input has the
	// conversation compacted first (CORRAL_COMPACT_THRESHOLD, 0.75); a
	// compaction brings it under two thirds of that.
	CompactThreshold float64
	// CompactKeepResults is how many of the most recent tool results a
	// compaction leaves as they are (CORRAL_COMPACT_KEEP_RESULTS, 3).
	CompactKeepResults int
	// ToolOutputCap is the most bytes of a tool call's output the model
	// reads, its head and tail kept (CORRAL_TOOL_OUTPUT_CAP, 32 KiB; 0
	// reads all of it). The session log keeps the whole output.
	ToolOutputCap int
	// ThinkingBudget is the tokens of extended thinking asked of the
	// models that have it (CORRAL_THINKING_BUDGET; 0, the default, asks
	// for none), ReasoningEffort the reasoning effort asked of those that
	// take one (CORRAL_REASONING_EFFORT: minimal, low, medium or high; ""
	// leaves the provider's default).
	ThinkingBudget  int
	ReasoningEffort string
}

// LoadConfig reads the configuration from getenv, applies defaults and
// validates it; an error names the offending variable.
func LoadConfig(getenv func(string) string) (Config, error) {
	host, _ := os.Hostname()
	cfg := Config{
		NATSURL:      envconf.NATSURL(getenv),
		Instance:     fmt.Sprintf("%s-%s", host, uuid.NewString()[:8]),
		DefaultModel: getenv("CORRAL_MODEL"),
		OpenAI: model.Config{
			APIKey:  model.Secret(getenv("OPENAI_API_KEY")),
			BaseURL: getenv("OPENAI_BASE_URL"),
		},
		Anthropic: model.Config{
			APIKey:  model.Secret(getenv("ANTHROPIC_API_KEY")),
			BaseURL: getenv("ANTHROPIC_BASE_URL"),
		},
		RetryDelay: time.Second,
	}
	var err error
	stream, err := envconf.Switch(getenv, "CORRAL_MODEL_STREAM", true)
	if err != nil {
		return Config{}, err
	}
	cfg.OpenAI.NoStream, cfg.Anthropic.NoStream = !stream, !stream
	if cfg.OpenAI.MaxTokensField, err = envconf.OneOf(getenv, "OPENAI_MAX_TOKENS_FIELD", model.MaxCompletionTokens, model.MaxCompletionTokens, model.MaxTokensLegacy); err != nil {
		return Config{}, err
	}
	if cfg.ShutdownGrace, err = envconf.Duration(getenv, "CORRAL_SHUTDOWN_GRACE", 10*time.Second); err != nil {
		return Config{}, err
	}
	if cfg.MaxTurns, err = envconf.Int(getenv, "CORRAL_MAX_TURNS", 50); err != nil {
		return Config{}, err
	}
	if cfg.MaxTokens, err = envconf.Int(getenv, "CORRAL_MAX_TOKENS", 8192); err != nil {
		return Config{}, err
	}
	if cfg.PromptCache, err = envconf.Switch(getenv, "CORRAL_PROMPT_CACHE", true); err != nil {
		return Config{}, err
	}
	if cfg.CacheTTL, err = envconf.OneOf(getenv, "CORRAL_PROMPT_CACHE_TTL", CacheTTLAuto, CacheTTLAuto, "5m", "1h"); err != nil {
		return Config{}, err
	}
	if cfg.Concurrency, err = envconf.Int(getenv, "CORRAL_HARNESS_CONCURRENCY", 64); err != nil {
		return Config{}, err
	}
	if cfg.TenantConcurrency, err = envconf.Int(getenv, "CORRAL_HARNESS_TENANT_CONCURRENCY", max(1, cfg.Concurrency/2)); err != nil {
		return Config{}, err
	}
	if cfg.TenantConcurrency > cfg.Concurrency {
		return Config{}, fmt.Errorf("CORRAL_HARNESS_TENANT_CONCURRENCY=%d: want at most CORRAL_HARNESS_CONCURRENCY (%d)", cfg.TenantConcurrency, cfg.Concurrency)
	}
	if cfg.Speedups, err = parseSpeedups(getenv("CORRAL_HARNESS_SPEEDUPS")); err != nil {
		return Config{}, err
	}
	if cfg.Policy, err = policy.FromEnv(getenv); err != nil {
		return Config{}, err
	}
	if err := loadContext(getenv, &cfg); err != nil {
		return Config{}, err
	}
	if k := getenv("CORRAL_APPROVAL_PUBLIC_KEY"); k != "" {
		if cfg.ApprovalKey, err = event.DecodePublicKey(k); err != nil {
			return Config{}, fmt.Errorf("CORRAL_APPROVAL_PUBLIC_KEY: %w", err)
		}
	}
	if cfg.CallKey, err = event.LoadPrivateKey(getenv, "CORRAL_CALL_SIGNING_KEY"); err != nil {
		return Config{}, err
	}
	if cfg.CallKey == nil {
		return Config{}, fmt.Errorf("CORRAL_CALL_SIGNING_KEY (or _FILE) is not set: the harness signs every tool call with it, and the tool services run only calls its public half verifies (corral keygen makes the pair)")
	}
	if cfg.DefaultModel == "" {
		switch {
		case cfg.Anthropic.APIKey != "" || cfg.Anthropic.BaseURL != "":
			cfg.DefaultModel = "anthropic:claude-sonnet-4-5"
		default:
			cfg.DefaultModel = "openai:gpt-4.1"
		}
	}
	return cfg, nil
}

// Providers returns the model clients the configuration enables.
func (c Config) Providers() model.Providers {
	var p model.Providers
	if c.OpenAI.APIKey != "" || c.OpenAI.BaseURL != "" {
		p.OpenAI = model.NewOpenAI(c.OpenAI)
	}
	if c.Anthropic.APIKey != "" || c.Anthropic.BaseURL != "" {
		p.Anthropic = model.NewAnthropic(c.Anthropic)
	}
	return p
}
