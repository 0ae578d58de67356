package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/services/gateway/internal/wire"
)

// Setup creates the gateway's KV buckets if they are missing: the session
// index ([bus.BucketSessions]), which the gateway alone writes, and the
// HTTP API's records ([bus.BucketGateway]), which clients of each tenant
// write under their tenant's keys (a user's, its own agents, sessions
// and files alone), and the webhooks' bucket and deliveries' stream, its
// alone. It is an administrator's work (corral setup; corral dev): the
// gateway's NATS user may not create streams.
//
// Clients write the records' stream directly, so the stream itself
// bounds what they may write: it allows no roll-up, which would let a
// publish on one tenant's key purge every other key; a record is at most
// maxRecordBytes; and the whole bucket at most maxRecordsBytes, new
// records refused once it is full, so that what clients write cannot
// fill the server's disk. Setup gives an older bucket these bounds where
// it has none, and keeps those an operator set.
func Setup(ctx context.Context, js jetstream.JetStream) error {
	for _, cfg := range []jetstream.KeyValueConfig{
		{Bucket: bus.BucketSessions, Description: "the session index: <tenant>.<session> -> status, user, model, turns, cost, title", Storage: jetstream.FileStorage, History: 1},
		{Bucket: bus.BucketGateway, Description: "the HTTP API's records: <tenant>.agent.<owner's user token>.<id>, <tenant>.session.<user token>.<id>, <tenant>.file.<user token>.<id>, <tenant>.vault.<id>",
			Storage: jetstream.FileStorage, History: 1, MaxValueSize: maxRecordBytes, MaxBytes: maxRecordsBytes},
	} {
		_, err := js.KeyValue(ctx, cfg.Bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			_, err = js.CreateKeyValue(ctx, cfg)
		}
		if err != nil {
			return fmt.Errorf("kv %s: %w (a NATS user that may not create buckets needs it created first: corral setup)", cfg.Bucket, err)
		}
	}
	if err := setupWebhooks(ctx, js); err != nil {
		return err
	}
	st, err := js.Stream(ctx, recordStream)
	if err != nil {
		return fmt.Errorf("kv %s: %w", bus.BucketGateway, err)
	}
	if cfg := st.CachedInfo().Config; cfg.AllowRollup || cfg.MaxMsgSize <= 0 || cfg.MaxBytes <= 0 || cfg.Discard != jetstream.DiscardNew {
		cfg.AllowRollup = false
		if cfg.MaxMsgSize <= 0 {
			cfg.MaxMsgSize = maxRecordBytes
		}
		if cfg.MaxBytes <= 0 {
			cfg.MaxBytes = maxRecordsBytes
		}
		// Full, refuse new records: never drop old ones.
		cfg.Discard = jetstream.DiscardNew
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("kv %s: allow no roll-up, bound its records: %w", bus.BucketGateway, err)
		}
	}
	return nil
}

// recordStream is the stream of the API's records.
const recordStream = "KV_" + bus.BucketGateway

// Bounds of the records' bucket. A record is at most maxRecordBytes: an
// agent's (its system prompt at most event.MaxSystemBytes, its name,
// description and metadata bounded as the API bounds them) and a
// session's, which holds its agent's, fit with room to spare. The bucket
// holds at most maxRecordsBytes (an operator may raise it: nats stream
// edit KV_gateway --max-bytes; Setup keeps what it finds).
//
// The server cannot bound the records of one tenant: a stream's limits
// count its messages, its bytes and the messages of each subject, never
// the subjects under a prefix. The gateway counts them before it creates
// one (Config.MaxRecords); a client writing the bucket directly is bound
// by these limits alone.
const (
	maxRecordBytes  = 256 << 10
	maxRecordsBytes = 4 << 30
)

// Errors of the JetStream API the gateway tells apart on a write.
const (
	// errCodeTooLarge: the message is larger than the stream takes.
	errCodeTooLarge jetstream.ErrorCode = 10054
	// errCodeStoreFailed: the stream did not store the message; with
	// the records' bounds, because the bucket is full.
	errCodeStoreFailed jetstream.ErrorCode = 10077
)

// storeRefusal is err, the error of a write of the record key, as the
// API's error when the server refused it for the bucket's bounds.
func storeRefusal(key string, size int, err error) error {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, nats.ErrMaxPayload), errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeTooLarge:
		return &apiError{http.StatusRequestEntityTooLarge, wire.TooLarge, fmt.Sprintf(
			"the record %s would be %d bytes; the gateway keeps records of at most %d bytes", key, size, maxRecordBytes)}
	case errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeStoreFailed:
		return &apiError{http.StatusInsufficientStorage, wire.APIError,
			"the server did not store the record: the gateway's bucket is full (KV_" + bus.BucketGateway + "'s max bytes); its operators can raise it"}
	}
	return err
}

// Kinds of records, the second token of their keys.
const (
	kindAgent   = "agent"
	kindSession = "session"
)

// recordKey is the key of a record of tenant.
func recordKey(tenant, kind, id string) string { return tenant + "." + kind + "." + id }

// sessionKey is the key of the record of session id of tenant, kept under
// its user's token: a user's key may write only its own user's sessions
// (see credential.Permissions), since a record not yet started says what
// its first request starts from and as whom. The token "*" makes a filter
// of every user's.
func sessionKey(tenant, userToken, id string) string {
	return recordKey(tenant, kindSession, userToken+"."+id)
}

// recordSubject is the subject of a record's key.
func recordSubject(key string) string { return "$KV." + bus.BucketGateway + "." + key }

// agentRecord is an agent as the gateway keeps it: what a session of it
// runs with.
type agentRecord struct {
	ID          string `json:"id"`
	Version     int    `json:"version"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// ModelID is the model as the client named it; Model as Corral runs
	// it, with its provider.
	ModelID string `json:"model_id"`
	Model   string `json:"model"`
	// System, Tools and Ask are what a session of the agent runs with
	// beyond its tenant's policy (see event.SessionConfig): its own
	// instructions, Corral's tools it is offered (nil: all six) and
	// those every call of which a reviewer approves.
	System    string            `json:"system,omitempty"`
	Tools     []string          `json:"tools,omitempty"`
	Ask       []string          `json:"ask,omitempty"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	UpdatedAt time.Time         `json:"updated_at"`
	// ArchivedAt is when it was archived: it starts no more sessions.
	ArchivedAt *time.Time `json:"archived_at,omitempty"`
}

// sessionRecord is a session the API created: what its first request
// starts from, and what the API shows of it that the log does not say.
type sessionRecord struct {
	ID          uuid.UUID         `json:"id"`
	Agent       agentRecord       `json:"agent"`
	Environment string            `json:"environment,omitempty"`
	Repo        *event.Repo       `json:"repo,omitempty"`
	Resources   []json.RawMessage `json:"resources,omitempty"`
	Title       string            `json:"title,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	// Budget is the session's spend ceiling as the API took it, and
	// Limits the caps that carry it to the harness.
	Budget *wire.Budget    `json:"budget,omitempty"`
	Limits json.RawMessage `json:"limits,omitempty"`
	// Vaults are the vaults whose credentials alone egress adds to the
	// session's requests (none named: every vault of the tenant and the
	// user that binds a request's host).
	Vaults []string `json:"vaults,omitempty"`
	// Files is the ref of the file list its file resources make (see
	// workspaceFrom), which its first request names.
	Files string `json:"files,omitempty"`
	// User is who the session's requests are from.
	User string `json:"user"`
	// Started is set once its first request is published: the one that
	// carries what its workspace starts from.
	Started   bool      `json:"started,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// errNoRecord is returned for a record that is not kept.
var errNoRecord = errors.New("no such record")

// readRecord reads the record key into v through js, a client's of the
// record's tenant, and returns its sequence (what a change expects).
func readRecord(ctx context.Context, js jetstream.JetStream, key string, v any) (uint64, error) {
	m, err := bus.LastBySubject(ctx, js, recordStream, recordSubject(key))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, errNoRecord
	}
	if err != nil {
		return 0, err
	}
	if len(m.Data) == 0 { // deleted
		return 0, errNoRecord
	}
	if err := json.Unmarshal(m.Data, v); err != nil {
		return 0, fmt.Errorf("record %s: %w", key, err)
	}
	return m.StreamSeq, nil
}

// writeRecord writes v as the record key through js, on the condition
// that the key's last write is at sequence after (0: the key has none):
// two writers racing, one wins and the other gets an error for which
// [bus.Conflict] holds.
func writeRecord(ctx context.Context, js jetstream.JetStream, key string, v any, after uint64) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	ctx, cancel := bus.Bound(ctx)
	defer cancel()
	subject := recordSubject(key)
	ctx, stop := bus.WhilePermitted(ctx, js.Conn(), subject)
	defer stop()
	if _, err := js.Publish(ctx, subject, b, jetstream.WithExpectLastSequencePerSubject(after)); err != nil {
		return fmt.Errorf("write %s: %w", key, storeRefusal(key, len(b), bus.Refusal(ctx, err)))
	}
	return nil
}

// listRecords returns every record whose key filter matches (a key with
// wildcards), by key, read through a consumer filtered to them.
func listRecords(ctx context.Context, js jetstream.JetStream, filter string) (map[string][]byte, error) {
	prefix := recordSubject("")
	msgs, err := bus.ReadByConsumer(ctx, js, recordStream, recordSubject(filter), 0)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("no %s bucket on this server: corral setup makes it", bus.BucketGateway)
	}
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte)
	for _, m := range msgs {
		key := strings.TrimPrefix(m.Subject, prefix)
		if len(m.Data) == 0 {
			delete(out, key)
			continue
		}
		out[key] = m.Data
	}
	return out, nil
}
