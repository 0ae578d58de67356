// Package modelinfo is Corral's table of models: each one's context window,
// its largest output and its capabilities (extended thinking, reasoning
// effort), by the start of its name. The harness sizes each session's
// conversation by it and asks each model only what it can do.
package modelinfo

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Capabilities a model may have, as a [Catalog] names them.
const (
	// Thinking: Anthropic's extended thinking (model.Request.Thinking).
	Thinking = "thinking"
	// ReasoningEffort: OpenAI's reasoning_effort
	// (model.Request.ReasoningEffort).
	ReasoningEffort = "reasoning_effort"
	// MaxCompletionTokens: the output limit is sent as
	// max_completion_tokens; the model refuses max_tokens.
	MaxCompletionTokens = "max_completion_tokens"
)

var capabilities = []string{Thinking, ReasoningEffort, MaxCompletionTokens}

// Info is what Corral knows of a model: how much a request may hold, how
// much it may write, and what it can do.
type Info struct {
	// Entry is the catalog entry the model matched: a prefix of its name,
	// provider included, or "*".
	Entry string `yaml:"-"`
	// ContextWindow is how many tokens a request may hold, input and
	// output together.
	ContextWindow int `yaml:"context_window"`
	// MaxOutput is the most output tokens a request may ask for; zero when
	// not known.
	MaxOutput int `yaml:"max_output"`
	// Capabilities are those of the capability constants ([Thinking], ...) the model has. In a
	// catalog file, a list (even empty) replaces the capabilities the
	// entry would have had; no list keeps them.
	Capabilities []string `yaml:"capabilities"`
}

// Can reports whether the model has capability c ([Thinking], [ReasoningEffort], [MaxCompletionTokens]).
func (i Info) Can(c string) bool { return slices.Contains(i.Capabilities, c) }

// Catalog is a table of models: each one's context window, largest output
// and capabilities, by the start of its name. The zero value is empty;
// [Default] is the built-in table.
type Catalog struct {
	entries map[string]Info
}

//go:embed catalog.yaml
var builtin []byte

// Default returns the built-in table (catalog.yaml beside this
// file): the current models of both providers, and "*" for any other.
func Default() *Catalog {
	c, err := parseCatalog(builtin)
	if err != nil {
		panic("modelinfo: the built-in catalog.yaml: " + err.Error())
	}
	return c
}

// Load returns the built-in table with the entries of the catalog
// file laid over it (see [Catalog.Over]). Errors name the file and say
// what is wrong.
func Load(file string) (*Catalog, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("model catalog: %w", err)
	}
	over, err := parseCatalog(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	c := Default().Over(over)
	for k, v := range c.entries {
		if err := checkEntry(k, v); err != nil {
			return nil, fmt.Errorf("%s: %w (with what the built-in entry gives)", file, err)
		}
	}
	return c, nil
}

// Over returns c with the entries of over laid on it. An entry of over
// whose window or largest output is zero, or that lists no capabilities,
// keeps those of the entry of c its name would have matched: a file
// that gives one model's window alone changes only that.
func (c *Catalog) Over(over *Catalog) *Catalog {
	out := &Catalog{entries: make(map[string]Info, len(c.entries)+len(over.entries))}
	for k, v := range c.entries {
		out.entries[k] = v
	}
	for k, v := range over.entries {
		base := c.Lookup(k)
		if v.ContextWindow == 0 {
			v.ContextWindow = base.ContextWindow
		}
		if v.MaxOutput == 0 {
			v.MaxOutput = base.MaxOutput
		}
		if v.Capabilities == nil {
			v.Capabilities = base.Capabilities
		}
		v.Entry = k
		out.entries[k] = v
	}
	return out
}

// Lookup returns what c says of the model name ("anthropic:claude-…",
// "openai:…"): the entry of the longest key that starts it, else the "*"
// entry, else an Info with no window (which the caller treats as not
// known).
func (c *Catalog) Lookup(name string) Info {
	best, found := "", false
	for k := range c.entries {
		if k != "*" && strings.HasPrefix(name, k) && (!found || len(k) > len(best)) {
			best, found = k, true
		}
	}
	if !found {
		best = "*"
	}
	return c.entries[best]
}

// parseCatalog reads a catalog file: a map of entries, each a model name's
// start (with its provider prefix) or "*".
func parseCatalog(data []byte) (*Catalog, error) {
	entries := map[string]Info{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&entries); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("model catalog: %w", err)
	}
	for k, v := range entries {
		if err := checkEntry(k, v); err != nil {
			return nil, err
		}
		v.Entry = k
		entries[k] = v
	}
	return &Catalog{entries: entries}, nil
}

// checkEntry says what is wrong with entry k of a catalog, if anything.
func checkEntry(k string, v Info) error {
	provider, rest, ok := strings.Cut(k, ":")
	switch {
	case k == "*":
	case !ok || provider != "openai" && provider != "anthropic" || rest == "":
		return fmt.Errorf("model catalog: %q: an entry is a model name's start, as openai:<model> or anthropic:<model>, or \"*\" for any other", k)
	}
	if v.ContextWindow < 0 || v.MaxOutput < 0 {
		return fmt.Errorf("model catalog: %q: context_window and max_output are numbers of tokens, not negative", k)
	}
	if v.ContextWindow > 0 && v.MaxOutput >= v.ContextWindow {
		return fmt.Errorf("model catalog: %q: max_output %d leaves no room for input in a context_window of %d", k, v.MaxOutput, v.ContextWindow)
	}
	for _, c := range v.Capabilities {
		if !slices.Contains(capabilities, c) {
			return fmt.Errorf("model catalog: %q: unknown capability %q: the capabilities are %s", k, c, strings.Join(capabilities, ", "))
		}
	}
	return nil
}
