package model

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// Config configures a provider's [Client]. The zero value of every field but
// APIKey is a usable default.
type Config struct {
	// APIKey is sent as x-api-key (Anthropic) or as a bearer token (OpenAI).
	// OpenAI-compatible local servers need none; it is then not sent.
	APIKey Secret
	// BaseURL is the provider's address. See [NewAnthropic] and [NewOpenAI]
	// for how each turns it into an endpoint.
	BaseURL string
	// HTTPClient sends the requests; nil means a client like
	// [http.DefaultClient] that keeps more idle connections per provider.
	HTTPClient *http.Client
	// MaxAttempts is how many times one Complete call may send its request;
	// zero means 5.
	MaxAttempts int
	// Timeout bounds each attempt, including reading the response; zero
	// means 10 minutes.
	Timeout time.Duration
	// Backoff is the wait before the first retry when the provider does not
	// say how long to wait. It doubles with every retry, up to 30s, and the
	// upper half of each wait is random. Zero means 500ms.
	Backoff time.Duration
	// Logger receives a warning for every retried failure; nil means none.
	Logger *slog.Logger
	// MaxTokensField names the OpenAI request field that carries
	// [Request.MaxTokens]: "max_completion_tokens" (what "" means), which
	// the API's reasoning models require, or "max_tokens", the older one,
	// for compatible servers that know only it. The Anthropic client
	// ignores it.
	MaxTokensField string
	// NoStream asks for whole JSON responses instead of streams, for a
	// compatible server that streams badly: nothing is then heard before
	// a turn ends ([Request.OnDelta] hears the whole content at once).
	NoStream bool
}

// Values of [Config.MaxTokensField].
const (
	MaxCompletionTokens = "max_completion_tokens"
	MaxTokensLegacy     = "max_tokens"
)

// Providers holds the configured clients, nil when a provider is not
// configured, and maps prefixed model names to them.
type Providers struct {
	OpenAI, Anthropic Client
}

// Resolve maps a model name of the form "openai:<model>" or
// "anthropic:<model>" to the provider's client and the provider's own name
// for the model (everything after the first colon, so "openai:llama3:8b"
// names "llama3:8b"). Errors say what to fix: a missing or unknown prefix
// or an empty model name wrap [ErrUnknownModel], a provider that is not
// configured [ErrNotConfigured].
func (p Providers) Resolve(name string) (Client, string, error) {
	prefix, model, ok := strings.Cut(name, ":")
	var c Client
	var env string
	switch {
	case ok && prefix == "openai":
		c, env = p.OpenAI, "OPENAI_API_KEY or OPENAI_BASE_URL"
	case ok && prefix == "anthropic":
		c, env = p.Anthropic, "ANTHROPIC_API_KEY"
	default:
		return nil, "", fmt.Errorf("%w %q: must be openai:<model> or anthropic:<model>", ErrUnknownModel, name)
	}
	if model == "" {
		return nil, "", fmt.Errorf("%w %q: the model name after %q is empty", ErrUnknownModel, name, prefix+":")
	}
	if c == nil {
		return nil, "", fmt.Errorf("%w for %q: set %s in the harness's environment (corral dev's, with corral dev) and restart it", ErrNotConfigured, name, env)
	}
	return c, model, nil
}
