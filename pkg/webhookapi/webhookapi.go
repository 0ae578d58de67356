// Package webhookapi is the contract of the gateway's webhooks: the
// request/reply API that corral webhooks speaks over NATS, the events a
// webhook announces, the JSON body of each POST, and its signature, which
// follows the Standard Webhooks convention (https://www.standardwebhooks.com):
// headers webhook-id, webhook-timestamp and webhook-signature, the last
// "v1,<base64 HMAC-SHA256 of id.timestamp.body>".
package webhookapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/bus"
)

// Operations of the webhook API.
const (
	OpAdd        = "add"
	OpList       = "ls"
	OpRemove     = "rm"
	OpTest       = "test"
	OpDeliveries = "deliveries"
)

// Error codes the API answers with (Nats-Service-Error-Code).
const (
	CodeBadRequest = "400"
	CodeForbidden  = "403"
	CodeNotFound   = "404"
	CodeInternal   = "500"
)

// Subject is where a client acting as user of tenant asks for op:
//
//	corral.webhook.<tenant>.<user token>.<op>
//
// Listing webhooks and their deliveries is open to every credential of
// the tenant there; adding, removing and testing one is not (see
// [TenantSubject]).
func Subject(tenant, user, op string) string {
	return bus.WebhookAPI(tenant, bus.UserToken(user), op)
}

// TenantSubject is where a reviewer or an operator of tenant asks for op
// on the tenant's webhooks, the only place a webhook is added, removed or
// tested: corral.webhook.<tenant>.tenant.<op>, which the NATS permissions
// let no user's or bot's credential reach.
func TenantSubject(tenant, op string) string {
	return bus.WebhookAPI(tenant, bus.VaultTenantScope, op)
}

// Events a webhook may ask for, the type of the POSTs that announce them.
const (
	// EventIdle: a request was answered (end of turn); the session waits
	// for a follow-up.
	EventIdle = "session.idle"
	// EventRequiresAction: a call (or a request egress held) waits for a
	// reviewer's confirmation.
	EventRequiresAction = "session.requires_action"
	// EventBudgetReached: a budget paused the session (or the tenant's
	// daily budget ended its request).
	EventBudgetReached = "session.budget_reached"
	// EventTerminated: someone stopped the session.
	EventTerminated = "session.terminated"
	// EventFailed: the session's request failed.
	EventFailed = "session.failed"
	// EventTest is what corral webhooks test sends; no webhook asks for it.
	EventTest = "webhook.test"
)

// Events lists the events a webhook may ask for.
func Events() []string {
	return []string{EventIdle, EventRequiresAction, EventBudgetReached, EventTerminated, EventFailed}
}

// ValidEvent reports whether a webhook may ask for ev.
func ValidEvent(ev string) bool { return slices.Contains(Events(), ev) }

// Webhook is a webhook as its API shows it: never its secret.
type Webhook struct {
	ID        string    `json:"id"`
	URL       string    `json:"url"`
	Events    []string  `json:"events"`
	CreatedAt time.Time `json:"created_at"`
}

// Request is the body of every operation: URL and Events for OpAdd, ID
// for OpRemove and OpTest (and to narrow OpDeliveries), Limit for
// OpDeliveries (the newest attempts, default 50).
type Request struct {
	URL    string   `json:"url,omitempty"`
	Events []string `json:"events,omitempty"`
	ID     string   `json:"id,omitempty"`
	Limit  int      `json:"limit,omitempty"`
}

// Reply answers an operation: Webhook for OpAdd (with Secret, the one
// time it is shown) and OpRemove, Webhooks for OpList, Deliveries for
// OpDeliveries (oldest first) and for OpTest (its one attempt).
type Reply struct {
	Webhook    *Webhook   `json:"webhook,omitempty"`
	Secret     string     `json:"secret,omitempty"`
	Webhooks   []Webhook  `json:"webhooks,omitempty"`
	Deliveries []Delivery `json:"deliveries,omitempty"`
}

// Outcomes of a delivery attempt.
const (
	// Delivered: the receiver answered 2xx.
	Delivered = "delivered"
	// Retrying: the attempt failed and another will be made.
	Retrying = "retrying"
	// Failed: the last attempt failed; the message is given up.
	Failed = "failed"
)

// Delivery is one attempt to deliver a message to a webhook.
type Delivery struct {
	Webhook string `json:"webhook"`
	// MessageID is the message's webhook-id: the same on every attempt.
	MessageID string    `json:"message_id"`
	Event     string    `json:"event"`
	Session   uuid.UUID `json:"session,omitzero"`
	Attempt   int       `json:"attempt"`
	Time      time.Time `json:"time"`
	// Status is the receiver's HTTP status, 0 when it gave none (Error
	// says why).
	Status  int    `json:"status,omitempty"`
	Error   string `json:"error,omitempty"`
	Outcome string `json:"outcome"`
	// Duration is how long the attempt took.
	Duration time.Duration `json:"duration_ns"`
}

// Settled reports whether no attempt follows d.
func (d Delivery) Settled() bool { return d.Outcome != Retrying }

// Payload is the JSON body of a POST.
type Payload struct {
	// Type is one of [Events], or [EventTest].
	Type string `json:"type"`
	// Timestamp is when the event was recorded.
	Timestamp time.Time `json:"timestamp"`
	Tenant    string    `json:"tenant"`
	Data      Data      `json:"data"`
}

// Data is what a payload says of its session.
type Data struct {
	// SessionID is the session's ID as the HTTP API's /v1/sessions shows
	// it (and corral sessions, corral logs take it).
	SessionID string `json:"session_id,omitempty"`
	// Status is the session's status as corral sessions shows it:
	// completed, waiting, paused, stopped or failed.
	Status string `json:"status,omitempty"`
	// StopReason is why it went idle as the HTTP API says it (end_turn,
	// requires_action, budget_reached), for the idle ones.
	StopReason string `json:"stop_reason,omitempty"`
	// Code is a failure's code; Reason says why it failed, was stopped,
	// paused or waits.
	Code   string `json:"code,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Tool is the tool of the call that waits for a confirmation.
	Tool string `json:"tool,omitempty"`
}

// SecretPrefix starts every webhook secret; the rest is the HMAC key in
// base64, as Standard Webhooks' libraries take it.
const SecretPrefix = "whsec_"

// Sign returns the webhook-signature of a message with id, sent at ts,
// with body, signed with secret ([SecretPrefix] and the key in base64):
// "v1," and the base64 HMAC-SHA256 of "id.ts.body".
func Sign(secret, id string, ts time.Time, body []byte) (string, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, SecretPrefix))
	if err != nil {
		return "", err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + Timestamp(ts) + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)), nil
}

// Timestamp is ts as the webhook-timestamp header says it: Unix seconds.
func Timestamp(ts time.Time) string { return strconv.FormatInt(ts.Unix(), 10) }

// MessageID is the webhook-id of the POSTs announcing the session event
// whose ID is event: the same on every attempt and from every gateway, so
// that a receiver drops the copies at-least-once delivery may bring.
func MessageID(event uuid.UUID) string { return "msg_" + strings.ReplaceAll(event.String(), "-", "") }
