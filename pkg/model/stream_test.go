package model_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"corral.dev/pkg/model"
	"corral.dev/pkg/modeltest"
	"corral.dev/pkg/tool"
)

// unstreamed is a transport that asks for a whole JSON response whatever
// the client asked for, the way a compatible server that ignores "stream"
// answers.
type unstreamed struct{}

func (unstreamed) RoundTrip(r *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, err
	}
	fields["stream"] = json.RawMessage("false")
	delete(fields, "stream_options")
	if body, err = json.Marshal(fields); err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	return http.DefaultTransport.RoundTrip(r)
}

// agentScript answers a first turn with thinking, text and two calls,
// then a long answer of text in several scripts.
func agentScript(c modeltest.Conversation) (modeltest.Turn, error) {
	if modeltest.Turns(c) == 0 {
		return modeltest.Turn{
			Thinking: "The user wants the files; ls first, then read the main one.",
			Text:     "Let me look at the workspace.",
			Calls: []modeltest.Call{
				{ID: "call_1", Name: tool.Bash, Input: map[string]any{"command": "ls -la /workspace"}},
				{ID: "call_2", Name: tool.Read, Input: `{"file_path": "/workspace/main.go", "limit": 200}`},
			},
		}, nil
	}
	return modeltest.Turn{Text: strings.Repeat("Done: main.go prints «héllo» — 日本語 too. ", 40)}, nil
}

// agentRequest is the first request of a conversation that caches its
// prompt (with a system prompt long enough for OpenAI's cache) and thinks.
func agentRequest() model.Request {
	return model.Request{
		Model:     "fake-1",
		System:    "You are a careful agent. " + strings.Repeat("Follow the rules. ", 400),
		Messages:  []model.Message{{Role: model.User, Content: []model.Block{{Type: model.TextBlock, Text: "what is in main.go?"}}}},
		Tools:     tool.Specs(),
		MaxTokens: 1000,
		CacheKey:  "acme.session-1",
		Thinking:  2048,
	}
}

// converse runs agentScript's two turns through c, and returns the
// responses.
func converse(t *testing.T, c model.Client, onDelta func(model.Delta)) []model.Response {
	t.Helper()
	req := agentRequest()
	req.OnDelta = onDelta
	var out []model.Response
	for turn := range 2 {
		resp, err := c.Complete(t.Context(), req)
		if err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
		out = append(out, resp)
		var results []model.Block
		for _, u := range resp.ToolUses() {
			results = append(results, model.Block{Type: model.ToolResultBlock, ToolUseID: u.ID, Content: "output of " + u.Name})
		}
		req.Messages = append(req.Messages,
			model.Message{Role: model.Assistant, Content: resp.Content},
			model.Message{Role: model.User, Content: results})
	}
	return out
}

// The response assembled from a stream is the one the same turns give
// when they come whole: text, calls, thinking, stop reasons and usage
// with its cache counts.
func TestStreamedEqualsJSON(t *testing.T) {
	t.Parallel()
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			streamed := modeltest.New(t, agentScript)
			whole := modeltest.New(t, agentScript)
			got := converse(t, p.new(model.Config{APIKey: "test-key", BaseURL: streamed.URL()}), nil)
			want := converse(t, p.new(model.Config{APIKey: "test-key", BaseURL: whole.URL(), HTTPClient: &http.Client{Transport: unstreamed{}}}), nil)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("streamed:\n%+v\nwhole:\n%+v", got, want)
			}
			for _, r := range streamed.Requests() {
				if !r.Stream {
					t.Errorf("a request to the streaming server did not ask for a stream")
				}
			}
			for _, r := range whole.Requests() {
				if r.Stream {
					t.Errorf("a request to the whole server asked for a stream")
				}
			}
			first, second := got[0], got[1]
			if len(first.ToolUses()) != 2 || first.Text() != "Let me look at the workspace." || !strings.HasPrefix(second.Text(), "Done: main.go") {
				t.Errorf("responses = %+v", got)
			}
			if second.Usage.CacheReadTokens == 0 || first.Usage.OutputTokens == 0 || first.Model != "fake-1" {
				t.Errorf("usage = %+v, %+v: want the second turn to read the cache", first.Usage, second.Usage)
			}
			if p.name == "anthropic" {
				if first.Content[0].Type != model.ThinkingBlock || first.Content[0].Signature == "" || first.Usage.CacheWriteTokens == 0 {
					t.Errorf("first turn = %+v, want a signed thinking block first and the prompt cached", first)
				}
			}
		})
	}
}

// OnDelta hears every piece of text, thinking and tool input in order,
// on the first attempt, and the pieces of each block add up to it.
func TestOnDelta(t *testing.T) {
	t.Parallel()
	for _, p := range providers {
		for _, mode := range []string{"streamed", "whole"} {
			t.Run(p.name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				srv := modeltest.New(t, agentScript)
				cfg := model.Config{APIKey: "test-key", BaseURL: srv.URL()}
				if mode == "whole" {
					cfg.HTTPClient = &http.Client{Transport: unstreamed{}}
				}
				var deltas []model.Delta
				resps := converse(t, p.new(cfg), func(d model.Delta) { deltas = append(deltas, d) })
				// Each turn's deltas, split where the index goes back.
				var turns [][]model.Delta
				for i, d := range deltas {
					if i == 0 || d.Index < deltas[i-1].Index {
						turns = append(turns, nil)
					}
					turns[len(turns)-1] = append(turns[len(turns)-1], d)
				}
				if len(turns) != len(resps) {
					t.Fatalf("deltas of %d turns, want %d: %+v", len(turns), len(resps), deltas)
				}
				for i, resp := range resps {
					checkDeltas(t, resp, turns[i])
				}
				if mode == "streamed" && len(turns[1]) < 10 {
					t.Errorf("the long answer came in %d deltas, want it in pieces", len(turns[1]))
				}
			})
		}
	}
}

// checkDeltas checks that deltas, all of attempt 1, add up to resp's
// content block by block.
func checkDeltas(t *testing.T, resp model.Response, deltas []model.Delta) {
	t.Helper()
	got := make([]strings.Builder, len(resp.Content))
	seen := make([]bool, len(resp.Content))
	for i, d := range deltas {
		if d.Attempt != 1 {
			t.Errorf("delta %d: attempt %d, want 1", i, d.Attempt)
		}
		if d.Index < 0 || d.Index >= len(resp.Content) {
			t.Fatalf("delta %d: index %d of %d blocks", i, d.Index, len(resp.Content))
		}
		b := resp.Content[d.Index]
		want := map[string]string{model.TextBlock: model.DeltaText, model.ThinkingBlock: model.DeltaThinking, model.ToolUseBlock: model.DeltaToolUse}[b.Type]
		if d.Kind != want {
			t.Errorf("delta %d: kind %q for a %s block", i, d.Kind, b.Type)
		}
		if b.Type == model.ToolUseBlock && !seen[d.Index] && (d.ID != b.ID || d.Name != b.Name) {
			t.Errorf("delta %d: the first of call %s names %q %q", i, b.ID, d.ID, d.Name)
		}
		seen[d.Index] = true
		got[d.Index].WriteString(d.Text)
	}
	for i, b := range resp.Content {
		want := b.Text
		switch b.Type {
		case model.ThinkingBlock:
			want = b.Thinking
		case model.ToolUseBlock:
			want = string(b.Input)
		}
		if got[i].String() != want {
			t.Errorf("block %d (%s): deltas add up to %q, want %q", i, b.Type, got[i].String(), want)
		}
	}
}

// A stream cut in the middle is asked again: the deltas of the second
// attempt make the response, which is whole.
func TestStreamCut(t *testing.T) {
	t.Parallel()
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			srv := modeltest.New(t, agentScript)
			srv.CutNext(1)
			c := p.new(model.Config{APIKey: "test-key", BaseURL: srv.URL(), Backoff: time.Millisecond})
			req := agentRequest()
			var deltas []model.Delta
			req.OnDelta = func(d model.Delta) { deltas = append(deltas, d) }
			resp, err := c.Complete(t.Context(), req)
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if n := len(srv.Requests()); n != 2 {
				t.Errorf("server saw %d requests, want 2", n)
			}
			var second []model.Delta
			sawFirst := false
			for _, d := range deltas {
				switch d.Attempt {
				case 1:
					sawFirst = true
				case 2:
					d.Attempt = 1 // for checkDeltas
					second = append(second, d)
				default:
					t.Errorf("delta of attempt %d", d.Attempt)
				}
			}
			if !sawFirst {
				t.Error("no delta of the cut attempt")
			}
			checkDeltas(t, resp, second)
			if len(resp.ToolUses()) != 2 || resp.Text() != "Let me look at the workspace." {
				t.Errorf("response = %+v", resp)
			}

			// Cut every time: the attempts run out, and the error says so.
			srv.CutNext(3)
			c = p.new(model.Config{APIKey: "test-key", BaseURL: srv.URL(), Backoff: time.Millisecond, MaxAttempts: 3})
			_, err = c.Complete(t.Context(), agentRequest())
			if err == nil || errors.Is(err, model.ErrPermanent) || !strings.Contains(err.Error(), "giving up after 3 attempts") {
				t.Errorf("err = %v, want the attempts to run out, not permanently", err)
			}
		})
	}
}

// An error event in the middle of a stream is retried when its kind may
// pass (overloaded, a server error, a rate limit), and ends the call
// otherwise.
func TestStreamErrorEvent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind       string
		wantStatus int
		retried    bool
	}{
		{"overloaded_error", 529, true},
		{"api_error", 500, true},
		{"rate_limit_error", 429, true},
		{"invalid_request_error", 400, false},
	}
	for _, p := range providers {
		for _, tc := range tests {
			t.Run(p.name+"/"+tc.kind, func(t *testing.T) {
				t.Parallel()
				srv := modeltest.New(t, agentScript)
				srv.ErrorEventNext(tc.kind, 1)
				c := p.new(model.Config{APIKey: "test-key", BaseURL: srv.URL(), Backoff: time.Millisecond})
				var attempts []int
				req := agentRequest()
				req.OnDelta = func(d model.Delta) { attempts = append(attempts, d.Attempt) }
				resp, err := c.Complete(t.Context(), req)
				if tc.retried {
					if err != nil || len(resp.ToolUses()) != 2 {
						t.Fatalf("Complete = %+v, %v; want the retry's response", resp, err)
					}
					if n := len(srv.Requests()); n != 2 || attempts[len(attempts)-1] != 2 {
						t.Errorf("requests %d, last delta's attempt %d; want 2 and 2", n, attempts[len(attempts)-1])
					}
					return
				}
				apiErr, ok := errors.AsType[*model.APIError](err)
				if !ok || !apiErr.Event || apiErr.Status != tc.wantStatus || !errors.Is(err, model.ErrPermanent) {
					t.Fatalf("err = %#v, want a permanent error event with status %d", err, tc.wantStatus)
				}
				if n := len(srv.Requests()); n != 1 {
					t.Errorf("requests = %d, want 1", n)
				}
				if !strings.Contains(err.Error(), "injected invalid_request_error") {
					t.Errorf("error %q does not say what the event said", err)
				}
			})
		}
	}
}

// The response is read as it arrives: OnDelta hears the first text while
// the server still holds the rest of the stream.
func TestStreamIsIncremental(t *testing.T) {
	t.Parallel()
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			hold := make(chan struct{})
			var mu sync.Mutex
			firsts := 0
			srv := modeltest.New(t, func(c modeltest.Conversation) (modeltest.Turn, error) {
				return modeltest.Turn{Text: strings.Repeat("streaming text ", 20), Hold: hold, OnFirstDelta: func() {
					mu.Lock()
					firsts++
					mu.Unlock()
				}}, nil
			})
			c := p.new(model.Config{APIKey: "test-key", BaseURL: srv.URL()})
			req := agentRequest()
			heard := make(chan string, 100)
			req.OnDelta = func(d model.Delta) { heard <- d.Text }
			done := make(chan error, 1)
			go func() {
				_, err := c.Complete(t.Context(), req)
				done <- err
			}()
			select {
			case first := <-heard:
				if !strings.HasPrefix(first, "streaming") {
					t.Errorf("first delta %q, want the answer's start", first)
				}
			case err := <-done:
				t.Fatalf("Complete returned (%v) before the stream was released", err)
			case <-time.After(10 * time.Second):
				t.Fatal("no delta while the stream was held")
			}
			select {
			case err := <-done:
				t.Fatalf("Complete returned (%v) while the stream was held", err)
			default:
			}
			close(hold)
			if err := <-done; err != nil {
				t.Fatalf("Complete: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if firsts != 1 {
				t.Errorf("OnFirstDelta called %d times, want 1", firsts)
			}
		})
	}
}

// A client that reads streams keeps its connection: three turns, one
// dial.
func TestStreamKeepsConnection(t *testing.T) {
	t.Parallel()
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			srv := modeltest.New(t, nil)
			var mu sync.Mutex
			dials := 0
			transport := http.DefaultTransport.(*http.Transport).Clone()
			dial := transport.DialContext
			transport.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
				mu.Lock()
				dials++
				mu.Unlock()
				return dial(ctx, network, addr)
			}
			c := p.new(model.Config{APIKey: "test-key", BaseURL: srv.URL(), HTTPClient: &http.Client{Transport: transport}})
			for range 3 {
				if _, err := c.Complete(t.Context(), conversation(0)); err != nil {
					t.Fatal(err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if dials != 1 {
				t.Errorf("%d dials for three requests, want 1", dials)
			}
		})
	}
}

// A response is read as its content type says, and as its first byte
// says when the type says neither: a stream, or a whole JSON body from a
// server that ignored "stream".
func TestResponseKinds(t *testing.T) {
	t.Parallel()
	stream := "data: {\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"streamed\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"
	whole := `{"model":"m","choices":[{"message":{"content":"whole"},"finish_reason":"stop"}]}`
	tests := []struct {
		contentType, body, want string
	}{
		{"text/event-stream; charset=utf-8", stream, "streamed"},
		{"application/json; charset=utf-8", whole, "whole"},
		{"", "\n " + whole, "whole"},
		{"text/plain", stream, "streamed"},
	}
	for _, tc := range tests {
		api := newFakeAPI(t, func(n int, w http.ResponseWriter, r *http.Request) {
			w.Header()["Content-Type"] = []string{tc.contentType}
			io.WriteString(w, tc.body)
		})
		resp, err := model.NewOpenAI(model.Config{BaseURL: api.URL}).Complete(t.Context(), conversation(0))
		if err != nil || resp.Text() != tc.want {
			t.Errorf("content type %q: %+v, %v; want %q", tc.contentType, resp, err, tc.want)
		}
	}
}

// A server that keeps the stream open past its end event holds the
// response back no longer than a moment.
func TestStreamOpenPastItsEnd(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "text/event-stream")
		io.WriteString(w, "data: {\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	})
	start := time.Now()
	resp, err := model.NewOpenAI(model.Config{BaseURL: api.URL}).Complete(t.Context(), conversation(0))
	if err != nil || resp.Text() != "hi" {
		t.Fatalf("Complete = %+v, %v", resp, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Complete took %v", d)
	}
}
