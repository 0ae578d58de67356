package bus

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/event"
	"corral.dev/pkg/tool"
)

// Stream names.
const (
	StreamRequests   = "REQUESTS"
	StreamEvents     = "EVENTS"
	StreamTools      = "TOOLS"
	StreamDeadLetter = "DEADLETTER"
	StreamPayloads   = "PAYLOADS"
	StreamUploads    = "UPLOADS"
)

// PayloadSubject is where the session events of tenant too large for the
// log are stored, one message each, named by their SHA-256 (hex).
func PayloadSubject(tenant, sha string) string { return "payloads." + tenant + "." + sha }

// UploadMaxBytes bounds what the UPLOADS stream holds.
const UploadMaxBytes = 4 << 30

// UploadSubject is where chunk index (from 0) of a file that user (a
// [UserToken]) of tenant uploaded is staged, the file named by its
// SHA-256 (hex): uploads.<tenant>.<user>.<sha256>.<index>. A client may
// write only under its own tenant and user, so what one stages is never
// taken for another's; the sandbox-manager checks every file's hash before
// it lays it out (see package upload).
func UploadSubject(tenant, user, sha string, index int) string {
	return "uploads." + tenant + "." + user + "." + sha + "." + strconv.Itoa(index)
}

// UploadFilter matches every chunk user (a [UserToken], or a wildcard)
// of tenant staged: what the permissions let a client write and read.
func UploadFilter(tenant, user string) string { return "uploads." + tenant + "." + user + ".>" }

// UploadChunkBytes is the size of every chunk of an uploaded file but its
// last: well under the NATS server's default largest message (1 MiB).
const UploadChunkBytes = 512 << 10

// UploadMaxAge is how long the UPLOADS stream keeps a staged chunk: a
// session starts from its files within minutes of their upload, and a file
// uploaded again after this long is sent again.
const UploadMaxAge = 7 * 24 * time.Hour

// The operations of the approval API, here because the permissions name
// them (the memory API's are package memoryapi's).
const (
	OpList   = "list"
	OpDecide = "decide"
)

// MemoryAPI is the subject of operation op of the memory API for user
// (a [UserToken], or a wildcard) of tenant: the service takes both from
// the subject, which the NATS permissions let a client publish only for
// its own tenant and user.
func MemoryAPI(tenant, user, op string) string {
	return "corral.memory." + tenant + "." + user + "." + op
}

// ApprovalAPI is the subject of operation op of the approval API, as
// [MemoryAPI]'s.
func ApprovalAPI(tenant, user, op string) string {
	return "corral.approval." + tenant + "." + user + "." + op
}

// WorkspaceAPI is the subject of operation op of the sandbox-manager's
// workspace API (the files of sessions' last snapshots), as
// [MemoryAPI]'s.
func WorkspaceAPI(tenant, user, op string) string {
	return "corral.workspace." + tenant + "." + user + "." + op
}

// VaultAPI is the subject of operation op of the egress service's vault
// API, as [MemoryAPI]'s; user may also be [VaultTenantScope], for the
// tenant's own vaults, which only a reviewer's credential may reach.
func VaultAPI(tenant, user, op string) string {
	return "corral.vault." + tenant + "." + user + "." + op
}

// VaultTenantScope stands for the user in the vault API's subjects of the
// tenant's own vaults. A [UserToken] always starts with "u-": no user's
// token is this.
const VaultTenantScope = "tenant"

// APICaller returns who a request on subject speaks for, in a
// request/reply API whose subjects are corral.<api>.<tenant>.<user
// token or [VaultTenantScope]>.<op> (the vault, environment and webhook
// APIs): its tenant, and its user, "" under [VaultTenantScope]. The NATS
// permissions let a credential publish only as itself, and only a
// reviewer's or an operator's under the tenant's scope, so the subject
// says who sent a request; its body is not asked.
func APICaller(subject, api string) (tenant, user string, err error) {
	tok := strings.Split(subject, ".")
	if len(tok) != 5 || tok[0] != "corral" || tok[1] != api {
		return "", "", fmt.Errorf("%s is not a subject of the %s API", subject, api)
	}
	if err := event.CheckTenant(tok[2]); err != nil {
		return "", "", fmt.Errorf("subject %s: %w", subject, err)
	}
	if tok[3] == VaultTenantScope {
		return tok[2], "", nil
	}
	if user, err = ParseUserToken(tok[3]); err != nil {
		return "", "", fmt.Errorf("subject %s: %w", subject, err)
	}
	return tok[2], user, nil
}

// EnvironmentAPI is the subject of operation op of the sandbox-manager's
// environment API, as [MemoryAPI]'s: reads as the user, and the changes
// (which decide what sessions may reach on the network) under
// [VaultTenantScope], which only a reviewer's or an operator's credential
// may reach, as the tenant's own vaults.
func EnvironmentAPI(tenant, user, op string) string {
	return "corral.environment." + tenant + "." + user + "." + op
}

// KV and object store bucket names.
const (
	BucketLeases      = "leases"
	BucketCalls       = "calls"
	BucketCredentials = "credentials"
	BucketSkills      = "skills"
	BucketApprovals   = "approvals"
	BucketUsage       = "usage"
	BucketWorkspaces  = "workspaces"
	BucketNodes       = "nodes"
	BucketPlacements  = "placements"
	// BucketVaults holds the tenants' credentials, encrypted with the
	// egress service's key; only the egress service may read or write it.
	BucketVaults = "vaults"
	// BucketEgress holds the requests egress held for a reviewer and
	// their state, by what a decision is bound to.
	BucketEgress = "egress"
	// BucketEnvironments holds each tenant's environments,
	// <tenant>.<name>, and the name of its default,
	// <tenant>._default (no environment's name starts with "_").
	BucketEnvironments = "environments"
	// BucketSlack is the Slack bridge's threads, each under its tenant
	// (<tenant>.thread.<session>): a bot's credential reaches its own
	// tenant's keys alone. The bridge's package sets it up.
	BucketSlack = "slack"
	// BucketSessions is the index of every session, <tenant>.<session>:
	// its user, status, model, turns, cost and title, folded from its
	// log by the gateway (the one writer), read by clients of the
	// tenant (corral sessions). The gateway's package sets it up.
	BucketSessions = "sessions"
	// BucketGateway is what the HTTP API keeps per tenant that the
	// session logs do not say: its agents (<tenant>.agent.<owner>.<id>,
	// or <tenant>.agent.<id> for one made before agents had owners), the
	// sessions it created (<tenant>.session.<user>.<id>), files
	// (<tenant>.file.<user>.<id>) and vaults (<tenant>.vault.<id>),
	// <owner> and <user> each a [UserToken], written by clients of the
	// tenant through the gateway (a user's, its own user's agents,
	// sessions and files alone). The gateway's package sets it up.
	BucketGateway = "gateway"
)

// EventDurables are the services' durable consumers of the EVENTS stream:
// no client may create, pull from or delete a consumer of theirs.
func EventDurables() []string {
	return []string{ConsumerHarnessSteps, ConsumerApprovals, ConsumerEgressDecisions, ConsumerGatewayIndex, ConsumerGatewayWebhooks, ConsumerGatewayTraces}
}

// Durable consumer names, <service>-<purpose>.
const (
	ConsumerHarnessRequests = "harness-requests"
	ConsumerHarnessSteps    = "harness-steps"
	ConsumerSandboxCalls    = "sandbox-manager-calls"
	ConsumerMemoryCalls     = "memory-calls"
	ConsumerApprovals       = "approval-requests"
	// ConsumerEgressDecisions is the egress services' consumer of the
	// reviewers' decisions, on the requests they held.
	ConsumerEgressDecisions = "egress-decisions"
	// ConsumerGatewayIndex is the gateway's consumer of every session
	// event, which it folds into [BucketSessions].
	ConsumerGatewayIndex = "gateway-index"
	// ConsumerGatewayTraces is the gateway's consumer of every session
	// event, whose spans it exports over OTLP when traces are on.
	ConsumerGatewayTraces = "gateway-traces"
)

// Tool services, the second token of a tool call's subject (see
// [tool.Route]).
const (
	// ServiceSandbox runs calls in sandboxes.
	ServiceSandbox = tool.ServiceSandbox
	// ServiceMemory keeps /memories and /skills.
	ServiceMemory = tool.ServiceMemory
)

// RequestTimeout bounds each request to the server. A request sent just
// before the server died can lose its answer; without a bound it would wait
// out the caller's whole deadline (minutes for a handler) instead of failing
// and being retried against the restarted server.
const RequestTimeout = 10 * time.Second

// Bound returns ctx limited to [RequestTimeout].
func Bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, RequestTimeout)
}

// RequestSubject is where a client acting as user publishes a
// [event.Request]: requests.<tenant>.<session>.<user token>. The NATS
// permissions let a credential publish only under its own tenant, and a
// user's credential only under its own user token: the subject, not the
// body, says whose request it is.
func RequestSubject(tenant string, session uuid.UUID, user string) string {
	return fmt.Sprintf("requests.%s.%s.%s", tenant, session, UserToken(user))
}

// ConsoleToken stands in a request's subject for a user: a stop sent from
// the sessions console (requests.<tenant>.<session>.console), which only
// the approval service may publish. The harness takes nothing else there,
// and records the stop as by the person its body names, whom the console
// signed in. It is no user token ("u-..."), so no user can be it.
const ConsoleToken = "console"

// ConsoleStopSubject is where the sessions console sends a stop of
// session.
func ConsoleStopSubject(tenant string, session uuid.UUID) string {
	return fmt.Sprintf("requests.%s.%s.%s", tenant, session, ConsoleToken)
}

// UserToken is the subject token standing for user ("u-" and the user in
// unpadded base64url): users may hold any character, subject tokens not.
func UserToken(user string) string {
	return "u-" + base64.RawURLEncoding.EncodeToString([]byte(user))
}

// ErrBadUserToken is returned by [ParseUserToken].
var ErrBadUserToken = errors.New("not a user token")

// ParseUserToken returns the user a [UserToken] stands for.
func ParseUserToken(tok string) (string, error) {
	b64, ok := strings.CutPrefix(tok, "u-")
	if !ok {
		return "", fmt.Errorf("%w: %q", ErrBadUserToken, tok)
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(b64)
	if err != nil || len(b) == 0 {
		return "", fmt.Errorf("%w: %q", ErrBadUserToken, tok)
	}
	return string(b), nil
}

// SessionEvents is the filter matching every event of one session. The
// tenant may be "*" when it is not known.
func SessionEvents(tenant string, session uuid.UUID) string {
	return fmt.Sprintf("events.%s.%s.>", tenant, session)
}

// SessionLifecycle is the filter matching a session's lifecycle events:
// requested, completed, stopped, failed.
func SessionLifecycle(tenant string, session uuid.UUID) string {
	return fmt.Sprintf("events.%s.%s.session.>", tenant, session)
}

// ToolSubject is the work-queue subject of a call to a tool service.
func ToolSubject(service, tenant string, session uuid.UUID) string {
	return fmt.Sprintf("tools.%s.%s.%s", service, tenant, session)
}

// ToolFilter matches every call to a tool service.
func ToolFilter(service string) string {
	return fmt.Sprintf("tools.%s.>", service)
}

// NodeSubject is where a sandbox-manager node takes the calls of the
// sessions placed on it, forwarded by the node that received them
// (core NATS request-reply: the call's durable message stays with the
// forwarder until the result is recorded).
func NodeSubject(node string) string {
	return "sandbox.node." + node
}

// PreviewSubject is where the harness asks the tool service that would
// run a call held for a reviewer what it would change: core NATS
// request-reply, preview.<service>.<tenant>.<session>, answered by one
// instance of the service ([PreviewQueue]). The request is the call,
// signed as a request for a preview ([event.ToolCall.SignPreview]); the
// reply is the text the reviewer reads ([corral.dev/pkg/preview]).
func PreviewSubject(service, tenant string, session uuid.UUID) string {
	return fmt.Sprintf("preview.%s.%s.%s", service, tenant, session)
}

// PreviewFilter matches every request for a preview by a tool service.
func PreviewFilter(service string) string {
	return fmt.Sprintf("preview.%s.>", service)
}

// PreviewQueue is the queue group in which the instances of a tool
// service answer [PreviewSubject].
func PreviewQueue(service string) string { return service + "-previews" }

// NodePreviewSubject is where a sandbox-manager node answers the requests
// for previews forwarded by the node that received them, for the sessions
// placed on it (their workspaces are there). Node names hold no dots.
func NodePreviewSubject(node string) string {
	return NodeSubject(node) + ".preview"
}

// LeaseSubject is the core NATS subject on which the harness instance
// named instance answers requests for the session leases lingering there
// (the request names the session). Characters a subject token cannot hold
// are replaced.
func LeaseSubject(instance string) string {
	return "harness.lease." + strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, instance)
}

// SessionKey is a session's key wherever a cache, lock, lease or bucket
// keeps something per session: session IDs are chosen by clients, so a key
// without the tenant would let one tenant's session stand for another's.
func SessionKey(tenant string, session uuid.UUID) string {
	return tenant + "." + session.String()
}

// CallKey is a tool call's key in the calls bucket: its session's key and
// its ID.
func CallKey(tenant string, session, call uuid.UUID) string {
	return SessionKey(tenant, session) + "." + call.String()
}

// PlacementKey is a session's key in [BucketPlacements].
func PlacementKey(tenant string, session uuid.UUID) string { return SessionKey(tenant, session) }

func deadLetterSubject(stream, consumer string) string {
	return fmt.Sprintf("deadletter.%s.%s", stream, consumer)
}

// Settings of the streams. Why each is what it is:
//   - everything is on file storage: a durable message must survive a
//     restart of the server;
//   - REQUESTS and TOOLS are work queues: a message is gone once a consumer
//     acked its effect, so they hold only work in flight;
//   - EVENTS keeps everything: it is the audit trail and the source the
//     harness rebuilds a session from;
//   - the duplicate windows are longer than any crash-and-restart, so a
//     re-publish after a crash is dropped; effects are also made idempotent
//     by IDs, so a re-publish after the window does no harm either.
var streams = []jetstream.StreamConfig{
	{
		Name:        StreamRequests,
		Description: "client requests: new sessions and follow-up messages",
		Subjects:    []string{"requests.>"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Duplicates:  time.Hour,
		MaxMsgSize:  1 << 20,
	},
	{
		Name:        StreamEvents,
		Description: "session logs: events.<tenant>.<session>.<domain>.<name>",
		Subjects:    []string{"events.>"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Duplicates:  10 * time.Minute,
		AllowDirect: true,
		// Every reader of a session log (a harness folding a session it
		// has no cache of, clients following, the approval service) uses
		// a short-lived ordered consumer, gone 5 s after its last read;
		// under load the server's default of 1,000 per stream is reached
		// within that window.
		MaxConsumers: 1 << 20,
	},
	{
		Name:        StreamTools,
		Description: "tool calls: tools.<service>.<tenant>.<session>",
		Subjects:    []string{"tools.>"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Duplicates:  10 * time.Minute,
	},
	{
		// One message per event too large for its session log, under its
		// tenant: a client reads its own tenant's by subject, which its
		// permissions name (an object store's names and chunks do not).
		Name:              StreamPayloads,
		Description:       "session events too large for the log: payloads.<tenant>.<sha256>",
		Subjects:          []string{"payloads.>"},
		Retention:         jetstream.LimitsPolicy,
		Storage:           jetstream.FileStorage,
		MaxMsgsPerSubject: 1,
		Duplicates:        10 * time.Minute,
		AllowDirect:       true,
	},
	{
		// Files clients upload for sessions to start from, staged per
		// tenant and user, never in the workspaces store: its blobs are
		// shared by every tenant, and a client able to write one would
		// change the files of every snapshot naming it. A client reads
		// its own by subject, as the large events; no rollup, so that a
		// publish can purge nothing.
		Name:              StreamUploads,
		Description:       "files uploaded for sessions to start from: uploads.<tenant>.<user>.<sha256>.<chunk>",
		Subjects:          []string{"uploads.>"},
		Retention:         jetstream.LimitsPolicy,
		Storage:           jetstream.FileStorage,
		MaxMsgsPerSubject: 1,
		MaxAge:            UploadMaxAge,
		Duplicates:        10 * time.Minute,
		// A chunk, and its headers.
		MaxMsgSize:  UploadChunkBytes + 4<<10,
		AllowDirect: true,
		// Bounded, new uploads refused once full, so that what clients
		// stage cannot fill the server's disk (and with it every
		// stream): a client told the stream is full tries later, or
		// after a week, when the oldest uploads are gone.
		MaxBytes: UploadMaxBytes,
		Discard:  jetstream.DiscardNew,
	},
	{
		Name:        StreamDeadLetter,
		Description: "messages consumers gave up on, with the reason",
		Subjects:    []string{"deadletter.>"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		MaxAge:      30 * 24 * time.Hour,
		// A rejected event is dead-lettered once, whichever of its
		// readers rejects it first (see RejectedID).
		Duplicates: time.Hour,
		// Read with direct gets, as the session logs are.
		AllowDirect: true,
	},
}

// ToolAckDelay is how long the tool services wait to acknowledge a call
// whose result is recorded (see [Consumer.AckDelay]): a session's next
// call, when its model answers at once, comes within it.
const ToolAckDelay = 20 * time.Millisecond

// LeaseTTL is how long a session lease lasts unless renewed. A harness that
// dies holding a lease blocks its sessions for at most this long (and the
// server's expiry check, which runs at most four times a second). Its
// holder renews it every third of it while a step runs.
const LeaseTTL = 5 * time.Second

// CallMarkerTTL is how long the sandbox-manager remembers that it started
// a call. It must outlast any redelivery of the call: tool calls wait on
// their work queue only while some sandbox-manager is down.
const CallMarkerTTL = 7 * 24 * time.Hour

// NodeLeaseTTL is how long a sandbox-manager node's lease lasts unless
// renewed. Sessions placed on a node that died move to another after at
// most this long.
const NodeLeaseTTL = 6 * time.Second

// PlacementTTL is how long a session's placement is kept. A session whose
// placement expired is placed afresh at its next call; its workspace comes
// from its snapshot wherever it lands.
const PlacementTTL = 30 * 24 * time.Hour

var buckets = []jetstream.KeyValueConfig{
	{
		Bucket:      BucketLeases,
		Description: "session leases: one harness works on a session at a time",
		TTL:         LeaseTTL,
		Storage:     jetstream.FileStorage,
		History:     1,
	},
	{
		// A call is written here (CallKey) just before its command
		// starts. A redelivered call that finds its marker was running
		// when its sandbox-manager died, and is not run again behind the
		// model's back unless it is safe to repeat.
		Bucket:      BucketCalls,
		Description: "tool calls started: <tenant>.<session>.<call> -> sandbox-manager instance",
		TTL:         CallMarkerTTL,
		Storage:     jetstream.FileStorage,
		History:     1,
	},
	{
		// Each live sandbox-manager node, renewed every NodeLeaseTTL/4.
		Bucket:      BucketNodes,
		Description: "sandbox-manager nodes alive: node -> instance",
		TTL:         NodeLeaseTTL,
		Storage:     jetstream.FileStorage,
		History:     1,
	},
	{
		// Which node a session's sandbox lives on. Valid while that
		// node's lease in BucketNodes is; another node takes the session
		// over (compare-and-set on the revision) once it is not.
		Bucket:      BucketPlacements,
		Description: "sandbox placements: <tenant>.<session> -> node",
		TTL:         PlacementTTL,
		Storage:     jetstream.FileStorage,
		History:     1,
	},
	{
		// The approval service's state: every approval asked for, pending
		// or decided, by call ID. Decisions are kept for the reviewers'
		// history; the session logs keep them for good.
		Bucket:      BucketApprovals,
		Description: "approvals: call ID -> the call, its context and its decision",
		TTL:         ApprovalHistoryTTL,
		Storage:     jetstream.FileStorage,
		History:     1,
	},
	{
		// The tenants' vaults: <tenant>.t.<name> for the tenant's own,
		// <tenant>.u.<user, base64url>.<name> for a user's. Each holds
		// its bindings and its secret sealed with the egress service's
		// key; no one else may read the bucket (deploy/nats.conf).
		Bucket:      BucketVaults,
		Description: "vault credentials, sealed: <tenant>.t|u.<user>.<name> -> bindings and secret",
		Storage:     jetstream.FileStorage,
		History:     1,
	},
	{
		// The tenants' environments: each one's definition, version and
		// build, written through the sandbox-managers' environment API
		// and by the node that built it. A key keeps its last writes, so
		// that a session started on a version since replaced still finds
		// its definition (see package environmentapi).
		Bucket:      BucketEnvironments,
		Description: "environments: <tenant>.<name> -> definition, version and build; <tenant>._default -> the default's name",
		Storage:     jetstream.FileStorage,
		History:     EnvironmentHistory,
	},
	{
		// Requests the egress service held for a reviewer, by tenant,
		// session and the hash of what a decision binds: pending,
		// approved (it may pass once), used or denied.
		Bucket:      BucketEgress,
		Description: "held egress requests: <tenant>.<session>.<binding> -> approval and state",
		TTL:         ApprovalHistoryTTL,
		Storage:     jetstream.FileStorage,
		History:     1,
	},
	{
		// Client credentials by ID: tenant, user, role and the secret's
		// hash. Written by corral credentials (admin), read by the auth
		// service alone.
		Bucket:      BucketCredentials,
		Description: "client credentials: ID -> tenant, user, role, secret hash",
		Storage:     jetstream.FileStorage,
		History:     1,
	},
	{
		// What each tenant, and each of its users, spent each day (UTC):
		// <tenant>.<day> and <tenant>.<day>.u.<user, base64url>. Kept
		// for a year and a month, for reports.
		Bucket:      BucketUsage,
		Description: "daily usage per tenant and user, for budgets and corral usage",
		TTL:         400 * 24 * time.Hour,
		Storage:     jetstream.FileStorage,
		History:     1,
	},
}

// UsageKey is the key of a tenant's usage on day (2006-01-02) in
// [BucketUsage], or of one of its users' when user is not empty.
func UsageKey(tenant, day, user string) string {
	if user == "" {
		return tenant + "." + day
	}
	return tenant + "." + day + ".u." + base64.RawURLEncoding.EncodeToString([]byte(user))
}

// EnvironmentHistory is how many writes of each environment
// [BucketEnvironments] keeps: its definition changed and its builds
// recorded. A session keeps the version it started with while its
// definition is among them.
const EnvironmentHistory = 32

// ApprovalHistoryTTL is how long the approval service keeps an approval;
// the session logs keep the requests and decisions for good.
const ApprovalHistoryTTL = 90 * 24 * time.Hour

// Large events are kept here, content-addressed; see [Record].
var objectStores = []jetstream.ObjectStoreConfig{
	{
		// Written by the memory service whenever a tenant's skills change:
		// <tenant>.index lists them for the harness's system prompt, and
		// <tenant>.files holds every skill file for the sandboxes.
		Bucket:      BucketSkills,
		Description: "each tenant's skills, as the harness and the sandboxes see them",
		Storage:     jetstream.FileStorage,
		MaxBytes:    1 << 30, // CORRAL_NATS_SKILLS_BYTES
	},
	{
		// Snapshots of the sandboxes' workspaces: each file's content once,
		// b.<sha256>, and each session's manifest, m.<tenant>.<session>.
		// Full, it refuses new snapshots (each call says so) until the
		// sandbox-managers' sweep collects files no manifest names.
		Bucket:      BucketWorkspaces,
		Description: "workspace snapshots: content-addressed files and each session's manifest",
		Storage:     jetstream.FileStorage,
		MaxBytes:    10 << 30, // CORRAL_NATS_WORKSPACES_BYTES
	},
}

// SkillsIndex and SkillsFiles name a tenant's objects in [BucketSkills].
func SkillsIndex(tenant string) string { return tenant + ".index" }

// SkillsFiles: see [SkillsIndex].
func SkillsFiles(tenant string) string { return tenant + ".files" }

// LiveSubject is where a session's output is published as it comes (the
// model's text as it streams, a running call's output): core NATS, not
// durable, live.<tenant>.<session>. The durable record stays the log's.
func LiveSubject(tenant string, session uuid.UUID) string {
	return fmt.Sprintf("live.%s.%s", tenant, session)
}

// LiveFilter matches the live output of every session of tenant ("*" for
// any).
func LiveFilter(tenant string) string { return "live." + tenant + ".*" }
