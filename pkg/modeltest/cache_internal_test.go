package modeltest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// The fake bills cached prompts as the providers do: Anthropic reads the
// prefix up to a breakpoint an earlier request cached and writes the rest
// up to its last breakpoint; OpenAI reads the longest earlier prefix of
// 1,024 tokens or more under the same key, in steps of 128.
func TestPromptCache(t *testing.T) {
	tool := `{"name":"Bash","description":"` + strings.Repeat("d", 4000) + `"}`
	msg := func(i int, marked bool) string {
		cc := ""
		if marked {
			cc = `,"cache_control":{"type":"ephemeral"}`
		}
		return fmt.Sprintf(`{"role":"user","content":[{"type":"text","text":"turn %d %s"%s}]}`, i, strings.Repeat("x", 400), cc)
	}
	anthropic := func(msgs ...string) []byte {
		return []byte(`{"tools":[` + tool[:len(tool)-1] + `,"cache_control":{"type":"ephemeral"}}],"system":"be brief","messages":[` + strings.Join(msgs, ",") + `]}`)
	}
	var c promptCache
	first := c.anthropic(anthropicSegments(anthropic(msg(1, true))))
	if first.read != 0 || first.written != first.input {
		t.Errorf("first request: %+v, want everything written", first)
	}
	second := c.anthropic(anthropicSegments(anthropic(msg(1, true), msg(2, true))))
	if second.read != first.input || second.written != second.input-first.input {
		t.Errorf("second request: %+v, want %d read and the rest written", second, first.input)
	}
	// The breakpoint moved on: the same prefix is still read.
	third := c.anthropic(anthropicSegments(anthropic(msg(1, false), msg(2, true), msg(3, true))))
	if third.read != second.input {
		t.Errorf("third request: %+v, want %d read", third, second.input)
	}
	// Another conversation reads the tools alone, up to their breakpoint.
	segs := anthropicSegments(anthropic(msg(9, true)))
	if other := c.anthropic(segs); other.read != segs[0].tokens {
		t.Errorf("another conversation: %+v, want the tools' %d tokens read", other, segs[0].tokens)
	}

	openai := func(key string, msgs ...string) ([]segment, string) {
		body := `{"prompt_cache_key":"` + key + `","tools":[` + tool + `],"messages":[` + strings.Join(msgs, ",") + `]}`
		var check map[string]json.RawMessage
		if err := json.Unmarshal([]byte(body), &check); err != nil {
			t.Fatal(err)
		}
		return openAISegments([]byte(body))
	}
	segs, key := openai("s1", msg(1, false))
	if u := c.openAI(key, segs); u.read != 0 {
		t.Errorf("first OpenAI request: %+v", u)
	}
	segs, key = openai("s1", msg(1, false), msg(2, false))
	u := c.openAI(key, segs)
	if u.read < 1024 || u.read%128 != 0 || u.read > u.input {
		t.Errorf("second OpenAI request: %+v, want a cached prefix in steps of 128", u)
	}
	segs, key = openai("s2", msg(1, false), msg(2, false))
	if u := c.openAI(key, segs); u.read != 0 {
		t.Errorf("another key: %+v, want nothing read", u)
	}
}

// What a one-hour breakpoint caches is counted apart: written up to it
// for the hour, up to a later default one for five minutes.
func TestPromptCacheLongTTL(t *testing.T) {
	block := func(text, ttl string) string {
		cc := ""
		switch ttl {
		case "5m":
			cc = `,"cache_control":{"type":"ephemeral"}`
		case "1h":
			cc = `,"cache_control":{"type":"ephemeral","ttl":"1h"}`
		}
		return `{"type":"text","text":"` + strings.Repeat(text, 200) + `"` + cc + `}`
	}
	body := func(blocks ...string) []byte {
		return []byte(`{"system":[` + blocks[0] + `],"messages":[{"role":"user","content":[` + strings.Join(blocks[1:], ",") + `]}]}`)
	}
	var c promptCache
	segs := anthropicSegments(body(block("s", "1h"), block("a", "1h"), block("b", "5m"), block("c", "")))
	u := c.anthropic(segs)
	long := segs[0].tokens + segs[1].tokens
	if u.written != long+segs[2].tokens || u.writtenLong != long {
		t.Errorf("usage %+v: want %d written, %d of them for an hour", u, long+segs[2].tokens, long)
	}
	// Read back up to the second breakpoint, the next request writes its
	// new one-hour stretch for the hour.
	segs = anthropicSegments(body(block("s", ""), block("a", "1h"), block("d", "1h"), block("e", "5m")))
	u = c.anthropic(segs)
	if u.read != long || u.writtenLong != segs[2].tokens || u.written != segs[2].tokens+segs[3].tokens {
		t.Errorf("second usage %+v", u)
	}
}
