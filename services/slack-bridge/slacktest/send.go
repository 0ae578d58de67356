package slacktest

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"
)

// Sign returns the X-Slack-Signature Slack sends with body at unix time
// ts: "v0=" and the hex HMAC-SHA256 of "v0:<ts>:<body>" keyed with the
// app's signing secret.
func Sign(secret string, ts int64, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "v0:%d:", ts)
	mac.Write(body)
	return "v0=" + hex.EncodeToString(mac.Sum(nil))
}

// App sends the bridge what Slack sends an app's request URLs, signed with
// Secret.
type App struct {
	// URL is the bridge's base URL, such as http://127.0.0.1:7482.
	URL    string
	Secret string
	// Team is the workspace's ID; Bot the app's bot user.
	Team, Bot string
}

// Response is the bridge's answer.
type Response struct {
	Status int
	Body   string
}

// sender posts each request on a connection of its own: a test that
// restarts the bridge on the same address would otherwise find a kept
// connection to the old one, closed as it is reused (Slack itself retries
// such a delivery).
var sender = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// Send posts body to path, signed at time at (Slack's signature), with
// the extra headers given as name, value pairs.
func (a App) Send(path, contentType string, body []byte, at time.Time, headers ...string) (Response, error) {
	req, err := http.NewRequest(http.MethodPost, a.URL+path, bytes.NewReader(body))
	if err != nil {
		return Response{}, err
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("X-Slack-Request-Timestamp", strconv.FormatInt(at.Unix(), 10))
	req.Header.Set("X-Slack-Signature", Sign(a.Secret, at.Unix(), body))
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := sender.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return Response{Status: resp.StatusCode, Body: string(b)}, err
}

// Event sends an Events API event_callback with the inner event inner
// (see [AppMention], [DirectMessage]) as Slack delivers it to
// /slack/events.
func (a App) Event(eventID string, inner map[string]any, headers ...string) (Response, error) {
	body, err := json.Marshal(a.Callback(eventID, inner))
	if err != nil {
		return Response{}, err
	}
	return a.Send("/slack/events", "application/json", body, time.Now(), headers...)
}

// Callback is the event_callback envelope of inner.
func (a App) Callback(eventID string, inner map[string]any) map[string]any {
	return map[string]any{
		"token":      "deprecated-verification-token",
		"team_id":    a.Team,
		"api_app_id": "A0CORRAL",
		"event":      inner,
		"type":       "event_callback",
		"event_id":   eventID,
		"event_time": time.Now().Unix(),
		"authorizations": []map[string]any{
			{"enterprise_id": nil, "team_id": a.Team, "user_id": a.Bot, "is_bot": true, "is_enterprise_install": false},
		},
		"is_ext_shared_channel": false,
		"event_context":         "4-eyJldCI6ImFwcF9tZW50aW9uIn0",
	}
}

// URLVerification is the request Slack sends when the request URL is set.
func URLVerification(challenge string) []byte {
	b, _ := json.Marshal(map[string]string{"token": "deprecated-verification-token", "challenge": challenge, "type": "url_verification"})
	return b
}

// AppMention is an app_mention event: user mentions the app in channel
// (in the thread threadTS unless empty) with text, in message ts.
func (a App) AppMention(channel, user, text, ts, threadTS string) map[string]any {
	e := map[string]any{
		"type": "app_mention", "user": user, "text": "<@" + a.Bot + "> " + text, "ts": ts,
		"channel": channel, "event_ts": ts, "client_msg_id": "c-" + ts,
	}
	if threadTS != "" {
		e["thread_ts"] = threadTS
	}
	return e
}

// DirectMessage is a message.im event: user writes text to the app in
// their direct message channel.
func DirectMessage(channel, user, text, ts, threadTS string) map[string]any {
	e := map[string]any{
		"type": "message", "channel_type": "im", "user": user, "text": text, "ts": ts,
		"channel": channel, "event_ts": ts, "client_msg_id": "c-" + ts,
	}
	if threadTS != "" {
		e["thread_ts"] = threadTS
	}
	return e
}

// Command sends the slash command command with text, as user types it in
// channel, to /slack/commands.
func (a App) Command(channel, user, command, text string) (Response, error) {
	return a.Post(a.CommandRequest(channel, user, command, text))
}

// Captured is a request as Slack signed it, which [App.Post] sends (again:
// a replay, as someone who captured it could).
type Captured struct {
	Path, ContentType string
	Body              []byte
	// At is when Slack signed it.
	At time.Time
}

// Post sends c, with its signature.
func (a App) Post(c Captured) (Response, error) {
	return a.Send(c.Path, c.ContentType, c.Body, c.At)
}

// triggers makes each slash command's trigger_id unique, as Slack's are.
var triggers atomic.Int64

// CommandRequest is the request Slack sends for the slash command command
// with text, as user types it in channel, signed now.
func (a App) CommandRequest(channel, user, command, text string) Captured {
	form := url.Values{
		"token": {"deprecated-verification-token"}, "team_id": {a.Team}, "team_domain": {"corral-test"},
		"channel_id": {channel}, "channel_name": {"general"}, "user_id": {user}, "user_name": {user},
		"command": {command}, "text": {text}, "api_app_id": {"A0CORRAL"},
		"response_url": {"https://hooks.slack.invalid/commands/1"},
		"trigger_id":   {fmt.Sprintf("13345224609.738474920.%d", triggers.Add(1))},
	}
	return Captured{Path: "/slack/commands", ContentType: "application/x-www-form-urlencoded", Body: []byte(form.Encode()), At: time.Now()}
}

// Click sends a block_actions interaction: user clicks the button
// actionID (carrying value) of the app's message messageTS in the thread
// threadTS of channel, to /slack/interactivity.
func (a App) Click(channel, user, messageTS, threadTS, actionID, value string) (Response, error) {
	payload := map[string]any{
		"type":       "block_actions",
		"user":       map[string]any{"id": user, "username": user, "name": user, "team_id": a.Team},
		"api_app_id": "A0CORRAL",
		"token":      "deprecated-verification-token",
		"container":  map[string]any{"type": "message", "message_ts": messageTS, "channel_id": channel, "is_ephemeral": false, "thread_ts": threadTS},
		"trigger_id": "13345224609.738474920.8088930838d88f008e0",
		"team":       map[string]any{"id": a.Team, "domain": "corral-test"},
		"channel":    map[string]any{"id": channel, "name": "general"},
		"message": map[string]any{
			"type": "message", "ts": messageTS, "thread_ts": threadTS, "bot_id": "B0BOT", "text": "Approval needed",
		},
		"response_url": "https://hooks.slack.invalid/actions/1",
		"actions": []map[string]any{{
			"action_id": actionID, "block_id": "corral_approval", "value": value, "type": "button",
			"text": map[string]any{"type": "plain_text", "text": actionID}, "action_ts": fmt.Sprint(time.Now().Unix()),
		}},
	}
	b, err := json.Marshal(payload)
	if err != nil {
		return Response{}, err
	}
	form := url.Values{"payload": {string(b)}}
	return a.Send("/slack/interactivity", "application/x-www-form-urlencoded", []byte(form.Encode()), time.Now())
}
