package modeltest

import (
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"sync"
)

// The fake caches prompts as the providers do, so that tests can check
// what a client's requests would be billed:
//   - Anthropic caches the prompt up to each block marked with
//     cache_control (a breakpoint), in the order tools, system, messages:
//     a request whose prompt up to one of its breakpoints is cached reads
//     that prefix from the cache (cache_read_input_tokens), and writes the
//     rest up to its last breakpoint (cache_creation_input_tokens, of
//     which cache_creation.ephemeral_1h_input_tokens are those up to
//     breakpoints with ttl "1h"); what follows is plain input_tokens.
//   - OpenAI caches every prompt of 1,024 tokens or more by itself, by
//     prefix, in steps of 128 tokens, among the requests that share a
//     prompt_cache_key (or carry none): a request reads the longest prefix
//     an earlier one had (prompt_tokens_details.cached_tokens, counted in
//     prompt_tokens).
//
// Tokens are the bytes of each piece of the prompt (a tool, the system
// prompt, a block or message) as canonical JSON, four to a token. The
// fake's cache never expires.

// segment is one piece of a prompt: its tokens, its canonical bytes
// (without any cache_control), and whether it carries a breakpoint, and
// for how long ("5m" or "1h").
type segment struct {
	tokens     int
	data       []byte
	breakpoint bool
	ttl        string
}

// usage is what a request is billed: its input tokens, of which read
// came from the cache and written went into it, writtenLong of those for
// an hour.
type usage struct {
	input, read, written, writtenLong int
}

// promptCache holds the cached prefixes, by their hash, with the key
// they were cached under.
type promptCache struct {
	mu       sync.Mutex
	prefixes map[[32]byte]bool
}

// prefixes returns the hash of each prefix of segs, keyed, and its tokens.
func prefixes(key string, segs []segment) (hashes [][32]byte, tokens []int) {
	h := sha256.New()
	h.Write([]byte(key))
	total := 0
	for _, s := range segs {
		fmt.Fprintf(h, "%d:", len(s.data))
		h.Write(s.data)
		var sum [32]byte
		copy(sum[:], h.Sum(nil))
		total += s.tokens
		hashes, tokens = append(hashes, sum), append(tokens, total)
	}
	return hashes, tokens
}

// anthropic bills a request of segs as the Messages API does.
func (c *promptCache) anthropic(segs []segment) usage {
	hashes, tokens := prefixes("anthropic", segs)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.prefixes == nil {
		c.prefixes = make(map[[32]byte]bool)
	}
	var u usage
	if len(tokens) > 0 {
		u.input = tokens[len(tokens)-1]
	}
	last, read := -1, -1
	for i, s := range segs {
		if !s.breakpoint {
			continue
		}
		last = i
		if c.prefixes[hashes[i]] {
			u.read, read = tokens[i], i
		}
	}
	if last >= 0 {
		u.written = tokens[last] - u.read
		// What is written up to each breakpoint is kept as long as it says.
		from := u.read
		for i := read + 1; i <= last; i++ {
			if !segs[i].breakpoint {
				continue
			}
			if segs[i].ttl == "1h" {
				u.writtenLong += tokens[i] - from
			}
			from = tokens[i]
		}
		for i, s := range segs {
			if s.breakpoint {
				c.prefixes[hashes[i]] = true
			}
		}
	}
	return u
}

// openAI bills a request of segs, sent with key, as Chat Completions does.
func (c *promptCache) openAI(key string, segs []segment) usage {
	hashes, tokens := prefixes("openai:"+key, segs)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.prefixes == nil {
		c.prefixes = make(map[[32]byte]bool)
	}
	var u usage
	if len(tokens) > 0 {
		u.input = tokens[len(tokens)-1]
	}
	for i := range segs {
		if c.prefixes[hashes[i]] {
			u.read = tokens[i]
		}
	}
	if u.read < 1024 {
		u.read = 0
	}
	u.read -= u.read % 128
	if u.input >= 1024 {
		for i := range segs {
			c.prefixes[hashes[i]] = true
		}
	}
	return u
}

// canonical returns raw as canonical JSON without its cache_control, and
// whether it had one, and its ttl. A value that is not an object is kept
// as it is.
func canonical(raw json.RawMessage) ([]byte, bool, string) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return raw, false, ""
	}
	cc, marked := obj["cache_control"]
	var ttl struct {
		TTL string `json:"ttl"`
	}
	_ = json.Unmarshal(cc, &ttl) // a breakpoint without a ttl is the default's
	delete(obj, "cache_control")
	data, _ := json.Marshal(obj) // keys sorted
	return data, marked, cmp.Or(ttl.TTL, "5m")
}

// segmentOf returns the segment of one piece of a prompt.
func segmentOf(prefix string, raw json.RawMessage) segment {
	data, marked, ttl := canonical(raw)
	data = append([]byte(prefix), data...)
	return segment{tokens: max(1, len(data)/4), data: data, breakpoint: marked, ttl: ttl}
}

// anthropicSegments splits a Messages API request into its prompt's
// pieces: each tool, the system prompt (or each of its blocks), each
// block of each message.
func anthropicSegments(body []byte) []segment {
	var req struct {
		System   json.RawMessage   `json:"system"`
		Tools    []json.RawMessage `json:"tools"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if json.Unmarshal(body, &req) != nil {
		return nil
	}
	var segs []segment
	for _, t := range req.Tools {
		segs = append(segs, segmentOf("tool:", t))
	}
	var blocks []json.RawMessage
	if json.Unmarshal(req.System, &blocks) == nil {
		for _, b := range blocks {
			segs = append(segs, segmentOf("system:", b))
		}
	} else if len(req.System) > 0 {
		segs = append(segs, segmentOf("system:", req.System))
	}
	for _, m := range req.Messages {
		blocks = nil
		if json.Unmarshal(m.Content, &blocks) != nil {
			segs = append(segs, segmentOf(m.Role+":", m.Content))
			continue
		}
		for _, b := range blocks {
			segs = append(segs, segmentOf(m.Role+":", b))
		}
	}
	return segs
}

// openAISegments splits a Chat Completions request into its prompt's
// pieces, each tool and each message, and returns its prompt_cache_key.
func openAISegments(body []byte) ([]segment, string) {
	var req struct {
		Tools          []json.RawMessage `json:"tools"`
		Messages       []json.RawMessage `json:"messages"`
		PromptCacheKey string            `json:"prompt_cache_key"`
	}
	if json.Unmarshal(body, &req) != nil {
		return nil, ""
	}
	var segs []segment
	for _, t := range req.Tools {
		segs = append(segs, segmentOf("tool:", t))
	}
	for _, m := range req.Messages {
		segs = append(segs, segmentOf("message:", m))
	}
	return segs, req.PromptCacheKey
}
