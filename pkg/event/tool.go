package event

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"corral.dev/pkg/model"
)

// Call links a tool_use block of a model response to the call ID Corral gave
// it. The ID is fixed when the response is recorded, so every retry of the
// same call carries the same ID. The call's input is the block's, not
// repeated here: file contents are recorded once.
type Call struct {
	ID        uuid.UUID `json:"id"`
	ToolUseID string    `json:"tool_use_id"`
	Name      string    `json:"name"`
	// Service, when set, is the tool service ("sandbox", "memory") the
	// call was dispatched to with the response. Only earlier versions
	// wrote it, for the calls they dispatched with the response, which
	// then had no [ToolDispatched] event; read it as one (see
	// [ModelResponded.Dispatches]). A dispatch is now always recorded by
	// a tool.dispatched event.
	Service string `json:"service,omitempty"`
}

// ModelResponded records one model response, before anything acts on it: a
// harness that crashes after the model answered reuses it instead of asking
// again. Schema: schemas/model/v1/responded.json.
type ModelResponded struct {
	Header
	// Turn counts model responses in the session, from 1.
	Turn       int           `json:"turn"`
	Model      string        `json:"model"`
	Content    []model.Block `json:"content"`
	StopReason string        `json:"stop_reason"`
	// Refusal is the model's explanation when it declined to answer.
	Refusal string      `json:"refusal,omitempty"`
	Usage   model.Usage `json:"usage"`
	Calls   []Call      `json:"calls"`
	// User is the session's user, whose daily usage the response counts
	// in.
	User string `json:"user,omitempty"`
}

// Dispatches returns the calls e dispatched itself (those with a
// [Call].Service, which only responses recorded by earlier versions
// have), each as the [ToolDispatched] event that says so today, under
// e's header, so that readers treat both alike.
func (e *ModelResponded) Dispatches() []*ToolDispatched {
	var out []*ToolDispatched
	for _, c := range e.Calls {
		if c.Service != "" {
			d := NewToolDispatched(e, c, c.Service)
			d.Header = e.Header
			d.Type = TypeToolDispatched
			out = append(out, d)
		}
	}
	return out
}

// NewToolDispatched returns the record that call c of response resp was
// dispatched to service.
func NewToolDispatched(resp *ModelResponded, c Call, service string) *ToolDispatched {
	return &ToolDispatched{
		Header:  NewHeader(TypeToolDispatched, resp.Tenant, resp.Session),
		Call:    c.ID,
		Turn:    resp.Turn,
		Name:    c.Name,
		Summary: Summary(resp.Input(c)),
		Service: service,
	}
}

// Summary is the start of a call's input, for people watching.
func Summary(input json.RawMessage) string {
	const n = 200
	if len(input) <= n {
		return string(input)
	}
	s := []rune(string(input[:n]))
	return string(s[:len(s)-1]) + "…"
}

// Input returns the input the model gave call c, from its tool_use block.
func (e *ModelResponded) Input(c Call) json.RawMessage {
	for _, b := range e.Content {
		if b.Type == model.ToolUseBlock && b.ID == c.ToolUseID {
			return b.Input
		}
	}
	return nil
}

// ToolCall is one tool call on the work queue, published on
// tools.<service>.<tenant>.<session> with its call ID as the Nats-Msg-Id.
// Schema: schemas/tool/v1/call.json.
type ToolCall struct {
	Header
	Call  uuid.UUID       `json:"call"`
	Turn  int             `json:"turn"`
	User  string          `json:"user"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
	// ExpectVersion is, for a Write or Edit of a memory or skill file, the
	// version of it this session last read or wrote; zero when it knows
	// none, so that only a new file may be created.
	ExpectVersion int64 `json:"expect_version,omitempty"`
	// After is the stream sequence of the last event of the session's log
	// when the call was put on the queue: the service records the result
	// right after it if nothing came in between, and says so (see
	// [ToolCompleted].After). Zero when unknown.
	After uint64 `json:"after,omitempty"`
	// ResultID is the message ID its result is recorded under (within
	// the session's key): drawn by the harness from the call's ID and a
	// key of its own, so that no one who saw the call's ID in the log
	// can record something under that ID first and have the result
	// dropped as a duplicate. Empty in a call of an earlier harness,
	// whose result goes under <call>:result. Like After, it says only
	// where the result goes.
	ResultID string `json:"result_id,omitempty"`
	// Signature is the harness's Ed25519 signature of
	// [ToolCall.SignedBytes]. A tool service runs a call only if it
	// verifies with the harness's public key: whoever else managed to put
	// a body on its queue, only the harness decides what runs.
	Signature []byte `json:"signature,omitempty"`
}

// ResultID returns the ID the result of call is recorded under, drawn
// from mac, a keyed hash of the call that only its harness can make (see
// [ToolCall.ResultID]): the call's ID, then 128 bits of mac in hex.
func ResultID(call uuid.UUID, mac []byte) string {
	return call.String() + ":result:" + hex.EncodeToString(mac[:16])
}

// CheckResultID reports whether c's ResultID, if any, is one
// [ResultID] makes for c: it goes into a header of the result's message,
// and whatever else it said would go there too.
func (c *ToolCall) CheckResultID() error {
	if c.ResultID == "" {
		return nil
	}
	mac, ok := strings.CutPrefix(c.ResultID, c.Call.String()+":result:")
	if b, err := hex.DecodeString(mac); !ok || err != nil || len(b) != 16 || strings.ToLower(mac) != mac {
		return fmt.Errorf("the call's result_id %q is not one of the call's", c.ResultID)
	}
	return nil
}

// What a call's signature says of it: that it runs, or only that its
// service may show what it would do.
const (
	signedCall    = "corral.tool.v1.call"
	signedPreview = "corral.tool.v1.preview"
)

// SignedBytes returns what a call's signature covers: the service it is
// for and every field that decides what it does (After only says where
// its result goes in the log, and ResultID under which ID).
func (c *ToolCall) SignedBytes(service string) []byte {
	return c.signed(signedCall, service)
}

func (c *ToolCall) signed(kind, service string) []byte {
	b, _ := json.Marshal([]any{
		kind, service, c.Tenant, c.Session, c.Call, c.Turn, c.User,
		c.Name, ArgsHash(c.Name, c.Input), c.ExpectVersion,
	})
	return b
}

// Sign signs c, for service, with the harness's private key.
func (c *ToolCall) Sign(key ed25519.PrivateKey, service string) {
	c.Signature = ed25519.Sign(key, c.SignedBytes(service))
}

// Verify reports whether c is a call for service signed by key.
func (c *ToolCall) Verify(key ed25519.PublicKey, service string) error {
	return c.verify(key, signedCall, service, "the call's signature is not the harness's for the "+service)
}

// SignPreview signs c, for service, as a request for a preview of what
// it would change, not as a call to run: the harness asks for previews
// of calls held for a reviewer, and a signature that ran them would let
// whoever saw the request run them before the reviewer decided.
func (c *ToolCall) SignPreview(key ed25519.PrivateKey, service string) {
	c.Signature = ed25519.Sign(key, c.signed(signedPreview, service))
}

// VerifyPreview reports whether c is a request for a preview of a call
// for service signed by key ([ToolCall.SignPreview]).
func (c *ToolCall) VerifyPreview(key ed25519.PublicKey, service string) error {
	return c.verify(key, signedPreview, service, "the request's signature is not the harness's for a preview by the "+service)
}

func (c *ToolCall) verify(key ed25519.PublicKey, kind, service, mismatch string) error {
	switch {
	case len(key) != ed25519.PublicKeySize:
		return fmt.Errorf("no key to verify the call with")
	case len(c.Signature) == 0:
		return fmt.Errorf("the call is not signed")
	case !ed25519.Verify(key, c.signed(kind, service), c.Signature):
		return errors.New(mismatch)
	}
	return nil
}

// ToolDispatched records that a call was put on the work queue.
// Schema: schemas/tool/v1/dispatched.json.
type ToolDispatched struct {
	Header
	Call uuid.UUID `json:"call"`
	Turn int       `json:"turn"`
	Name string    `json:"name"`
	// Summary is the start of the call's input, for people watching; the
	// whole input is in the model.responded event.
	Summary string `json:"summary"`
	Service string `json:"service"`
}

// ToolCompleted records the result of a call: what the model will read.
// Schema: schemas/tool/v1/completed.json.
type ToolCompleted struct {
	Header
	Call      uuid.UUID `json:"call"`
	Name      string    `json:"name"`
	Output    string    `json:"output"`
	IsError   bool      `json:"is_error,omitempty"`
	ExitCode  *int      `json:"exit_code,omitempty"`
	Truncated bool      `json:"truncated,omitempty"`
	TimedOut  bool      `json:"timed_out,omitempty"`
	// DurationMS is how long the call ran, in milliseconds.
	DurationMS int64 `json:"duration_ms"`
	// Path and Version are, for a call on a memory or skill file, the file
	// and the version of it the call read or wrote: what a later Write or
	// Edit of it by this session expects to find.
	Path    string `json:"path,omitempty"`
	Version int64  `json:"version,omitempty"`
	// Service is the tool service that ran the call ("sandbox",
	// "memory"); empty for a call the harness refused. User is the
	// session's user. Both are what usage is counted by.
	Service string `json:"service,omitempty"`
	User    string `json:"user,omitempty"`
	// After, when set, is the stream sequence of the event this one
	// directly follows in the session's log: it was recorded on that
	// condition. A reader that has folded the log up to After folds this
	// event in without reading the log.
	After uint64 `json:"after,omitempty"`
	// Egress is, for a Bash call of a sandbox with network, what the
	// call sent out and had refused. Absent when nothing went out or was
	// refused.
	Egress *EgressSummary `json:"egress,omitempty"`
	// Prepared is, for the call that prepared a session's workspace
	// ([SessionRequested].Prepare), what it laid out.
	Prepared *Prepared `json:"prepared,omitempty"`
	// Changes is, in a session whose workspace started from a repository
	// or uploaded files, what the workspace changed since, as of the
	// snapshot taken after this call.
	Changes *Changes `json:"changes,omitempty"`
}

// PrepareInput is the input of the call that prepares a session's
// workspace (tool name [PrepareTool]): what it starts from, as the
// session's first request named it.
type PrepareInput struct {
	Repo               *Repo  `json:"repo,omitempty"`
	Files              string `json:"files,omitempty"`
	Environment        string `json:"environment,omitempty"`
	EnvironmentVersion string `json:"environment_version,omitempty"`
	// Vaults are the session's ([SessionRequested].Vaults): a clone
	// gets their credentials alone.
	Vaults []string `json:"vaults,omitempty"`
}

// PrepareTool is the name of the call that prepares a workspace. It is no
// tool the model is offered or may call.
const PrepareTool = "corral.prepare"

// Prepared says what preparing a workspace laid out.
type Prepared struct {
	// Files and Bytes count the regular files laid out in /workspace.
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
	// Commit is the commit a repository was checked out at.
	Commit string `json:"commit,omitempty"`
	// SetupMS is how long the environment's setup ran, when this
	// preparation ran it (the first session of an environment's version
	// does); zero when the environment was built already.
	SetupMS int64 `json:"setup_ms,omitempty"`
}

// Changes is what a workspace started from a repository or uploaded
// files changed since:
// the files added, modified and deleted (the repository's .git left out),
// and the lines inserted and deleted in text files.
type Changes struct {
	Files      []ChangedFile `json:"files"`
	Insertions int           `json:"insertions"`
	Deletions  int           `json:"deletions"`
	// More counts the files changed past the first [MaxChangedFiles],
	// which are not listed and whose lines are not counted.
	More int `json:"more,omitempty"`
}

// MaxChangedFiles is how many files a [Changes] lists.
const MaxChangedFiles = 200

// ChangedFile is one file of [Changes]: Status is "added", "modified" or
// "deleted"; a binary file counts no lines.
type ChangedFile struct {
	Path       string `json:"path"`
	Status     string `json:"status"`
	Insertions int    `json:"insertions,omitempty"`
	Deletions  int    `json:"deletions,omitempty"`
	Binary     bool   `json:"binary,omitempty"`
}

// Offloaded stands in the log for an event too large to carry inline: the
// event's JSON is stored once in the payloads object store under Object,
// named for its SHA-256, and readers fetch it from there. The stub keeps the
// event's header and subject, so filters and ordering are unchanged.
// Schema: schemas/bus/v1/offloaded.json.
type Offloaded struct {
	Header
	// Of is the type of the stored event.
	Of     string `json:"of"`
	Object string `json:"object"`
	Size   int    `json:"size"`
}

// DeadLetter records a message a consumer gave up on: undecodable, or
// failing every delivery. It is kept in the DEADLETTER stream.
// Schema: schemas/bus/v1/deadletter.json.
type DeadLetter struct {
	Type      string    `json:"type"`
	ID        uuid.UUID `json:"id"`
	Time      time.Time `json:"time"`
	Stream    string    `json:"stream"`
	Consumer  string    `json:"consumer"`
	Subject   string    `json:"subject"`
	StreamSeq uint64    `json:"stream_seq"`
	Delivered uint64    `json:"delivered"`
	Reason    string    `json:"reason"`
	// Data is the original payload.
	Data []byte `json:"data"`
}

// LoadCallKey reads the harness's public key for calls, which every tool
// service needs, from CORRAL_CALL_PUBLIC_KEY.
func LoadCallKey(getenv func(string) string) (ed25519.PublicKey, error) {
	s := getenv("CORRAL_CALL_PUBLIC_KEY")
	if s == "" {
		return nil, fmt.Errorf("CORRAL_CALL_PUBLIC_KEY is not set: a tool service runs only calls that the harness signed, which this key verifies (corral keygen makes the pair)")
	}
	k, err := DecodePublicKey(s)
	if err != nil {
		return nil, fmt.Errorf("CORRAL_CALL_PUBLIC_KEY: %w", err)
	}
	return k, nil
}
