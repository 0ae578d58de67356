package slackbridge

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/slack-go/slack"
)

// webAPI calls Slack's Web API: JSON bodies for the methods that write,
// the bot token as a Bearer token, and an answer that is not "ok" turned
// into an [*APIError]. A 429 is waited out as its Retry-After says.
type webAPI struct {
	base  string
	token Secret
	hc    *http.Client
	log   *slog.Logger
}

// APIError is a Web API answer with "ok": false.
type APIError struct {
	Method string
	Code   string // Slack's "error": "channel_not_found", "not_in_channel"...
}

func (e *APIError) Error() string { return fmt.Sprintf("slack %s: %s", e.Method, e.Code) }

// transientCodes are the "error" values of calls worth trying again.
var transientCodes = []string{"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}

// Permanent reports whether a call that failed with err would fail again
// however often it were retried: Slack refused it for what it is.
func permanent(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && !slices.Contains(transientCodes, ae.Code)
}

// maxRateLimitWaits bounds how many 429s one call waits out.
const maxRateLimitWaits = 10

// call sends a Web API method. body is sent as JSON, or, when it is a
// url.Values, as a form (the methods that read take no JSON). out, if not
// nil, receives the answer.
func (c *webAPI) call(ctx context.Context, method string, body, out any) error {
	var data []byte
	contentType := "application/json; charset=utf-8"
	if form, ok := body.(url.Values); ok {
		data, contentType = []byte(form.Encode()), "application/x-www-form-urlencoded"
	} else {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return fmt.Errorf("slack %s: %w", method, err)
		}
	}
	for waits := 0; ; waits++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/"+method, bytes.NewReader(data))
		if err != nil {
			return fmt.Errorf("slack %s: %w", method, err)
		}
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Authorization", "Bearer "+string(c.token))
		resp, err := c.hc.Do(req)
		if err != nil {
			return fmt.Errorf("slack %s: %w", method, err)
		}
		raw, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("slack %s: %w", method, err)
		}
		if resp.StatusCode == http.StatusTooManyRequests && waits < maxRateLimitWaits {
			wait := time.Second
			if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
				wait = time.Duration(s) * time.Second
			}
			c.log.WarnContext(ctx, "slack rate limited", "method", method, "retry_after", wait)
			select {
			case <-ctx.Done():
				return fmt.Errorf("slack %s: rate limited: %w", method, ctx.Err())
			case <-time.After(wait):
			}
			continue
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("slack %s: HTTP %s", method, resp.Status)
		}
		var answer struct {
			OK    bool   `json:"ok"`
			Error string `json:"error"`
		}
		if err := json.Unmarshal(raw, &answer); err != nil {
			return fmt.Errorf("slack %s: %w", method, err)
		}
		if !answer.OK {
			return &APIError{Method: method, Code: cmp.Or(answer.Error, "unknown_error")}
		}
		if out != nil {
			if err := json.Unmarshal(raw, out); err != nil {
				return fmt.Errorf("slack %s: %w", method, err)
			}
		}
		return nil
	}
}

// message is a message to post or an update of one.
type message struct {
	Channel  string               `json:"channel"`
	TS       string               `json:"ts,omitempty"`        // chat.update: the message to change
	ThreadTS string               `json:"thread_ts,omitempty"` // chat.postMessage: the thread to answer in
	Text     string               `json:"text"`
	Blocks   []slack.Block        `json:"blocks,omitempty"`
	Metadata *slack.SlackMetadata `json:"metadata,omitempty"`
	// User is who an ephemeral message is shown to.
	User string `json:"user,omitempty"`
}

// postMessage posts m (chat.postMessage) and returns its ts.
func (c *webAPI) postMessage(ctx context.Context, m message) (string, error) {
	var out struct {
		TS string `json:"ts"`
	}
	if err := c.call(ctx, "chat.postMessage", m, &out); err != nil {
		return "", err
	}
	return out.TS, nil
}

// update replaces the message m.TS of m.Channel (chat.update). Blocks nil
// removes the message's blocks, and so its buttons.
func (c *webAPI) update(ctx context.Context, m message) error {
	body := struct {
		message
		Blocks []slack.Block `json:"blocks"`
	}{m, m.Blocks}
	if body.Blocks == nil {
		body.Blocks = []slack.Block{}
	}
	return c.call(ctx, "chat.update", body, nil)
}

// postEphemeral shows m to m.User only (chat.postEphemeral).
func (c *webAPI) postEphemeral(ctx context.Context, m message) error {
	return c.call(ctx, "chat.postEphemeral", m, nil)
}

// reply is a message of a thread as conversations.replies lists it.
type reply struct {
	TS       string               `json:"ts"`
	Text     string               `json:"text"`
	Metadata *slack.SlackMetadata `json:"metadata,omitempty"`
}

// replies returns the messages of the thread ts of channel, with their
// metadata (conversations.replies).
func (c *webAPI) replies(ctx context.Context, channel, ts string) ([]reply, error) {
	var all []reply
	cursor := ""
	for {
		form := url.Values{"channel": {channel}, "ts": {ts}, "include_all_metadata": {"true"}, "limit": {"200"}}
		if cursor != "" {
			form.Set("cursor", cursor)
		}
		var out struct {
			Messages []reply `json:"messages"`
			Meta     struct {
				NextCursor string `json:"next_cursor"`
			} `json:"response_metadata"`
		}
		if err := c.call(ctx, "conversations.replies", form, &out); err != nil {
			return nil, err
		}
		all = append(all, out.Messages...)
		if cursor = out.Meta.NextCursor; cursor == "" {
			return all, nil
		}
	}
}

// uploadFile shares content as a file named filename in the thread
// threadTS of channel, the way files.uploadV2 does:
// files.getUploadURLExternal, the bytes sent to the URL it gives, and
// files.completeUploadExternal. The bot token goes to Slack's Web API
// only, never to the upload URL.
func (c *webAPI) uploadFile(ctx context.Context, channel, threadTS, filename, title string, content []byte) error {
	var up struct {
		UploadURL string `json:"upload_url"`
		FileID    string `json:"file_id"`
	}
	form := url.Values{"filename": {filename}, "length": {strconv.Itoa(len(content))}}
	if err := c.call(ctx, "files.getUploadURLExternal", form, &up); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, up.UploadURL, bytes.NewReader(content))
	if err != nil {
		return fmt.Errorf("slack file upload: %w", err)
	}
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("slack file upload: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("slack file upload: HTTP %s", resp.Status)
	}
	body := map[string]any{
		"files":      []map[string]string{{"id": up.FileID, "title": title}},
		"channel_id": channel,
		"thread_ts":  threadTS,
	}
	return c.call(ctx, "files.completeUploadExternal", body, nil)
}
