package event

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Type names, one per schema (schemas/<domain>/v1/<name>.json).
const (
	TypeRequest           = "corral.session.v1.request"
	TypeSessionRequested  = "corral.session.v1.requested"
	TypeModelResponded    = "corral.model.v1.responded"
	TypeToolCall          = "corral.tool.v1.call"
	TypeToolDispatched    = "corral.tool.v1.dispatched"
	TypeToolCompleted     = "corral.tool.v1.completed"
	TypeSessionCompleted  = "corral.session.v1.completed"
	TypeSessionFailed     = "corral.session.v1.failed"
	TypeDeadLetter        = "corral.bus.v1.deadletter"
	TypeOffloaded         = "corral.bus.v1.offloaded"
	TypeSkillSet          = "corral.skill.v1.set"
	TypeApprovalRequested = "corral.approval.v1.requested"
	TypeApprovalDecided   = "corral.approval.v1.decided"
	TypeSessionStopped    = "corral.session.v1.stopped"
	TypeBudgetRaise       = "corral.budget.v1.raise"
	TypeSessionPaused     = "corral.session.v1.paused"
	TypeSessionResumed    = "corral.session.v1.resumed"
	TypeContextCompacted  = "corral.context.v1.compacted"
)

// ErrUnknownType is returned by [Parse] for a message whose "type" is not one
// of ours.
var ErrUnknownType = errors.New("unknown message type")

// Header is the envelope every session event starts with.
type Header struct {
	Type    string    `json:"type"`
	ID      uuid.UUID `json:"id"`
	Time    time.Time `json:"time"`
	Tenant  string    `json:"tenant"`
	Session uuid.UUID `json:"session"`
}

// Head returns the event's header; it lets code handle any event generically.
func (h *Header) Head() *Header { return h }

// Event is any session event: a pointer to one of the types below.
type Event interface{ Head() *Header }

// NewHeader returns a header of type typ with a fresh time-ordered ID.
func NewHeader(typ, tenant string, session uuid.UUID) Header {
	return Header{Type: typ, ID: uuid.Must(uuid.NewV7()), Time: time.Now().UTC(), Tenant: tenant, Session: session}
}

// Kind returns the part of a type name that names a session event in
// subjects: "corral.tool.v1.completed" → "tool.completed".
func Kind(typ string) string {
	parts := strings.Split(typ, ".")
	if len(parts) != 4 {
		return typ
	}
	return parts[1] + "." + parts[3]
}

var registry = map[string]func() any{
	TypeRequest:           func() any { return &Request{} },
	TypeSessionRequested:  func() any { return &SessionRequested{} },
	TypeModelResponded:    func() any { return &ModelResponded{} },
	TypeToolCall:          func() any { return &ToolCall{} },
	TypeToolDispatched:    func() any { return &ToolDispatched{} },
	TypeToolCompleted:     func() any { return &ToolCompleted{} },
	TypeSessionCompleted:  func() any { return &SessionCompleted{} },
	TypeSessionFailed:     func() any { return &SessionFailed{} },
	TypeDeadLetter:        func() any { return &DeadLetter{} },
	TypeOffloaded:         func() any { return &Offloaded{} },
	TypeSkillSet:          func() any { return &SkillSet{} },
	TypeApprovalRequested: func() any { return &ApprovalRequested{} },
	TypeApprovalDecided:   func() any { return &ApprovalDecided{} },
	TypeSessionStopped:    func() any { return &SessionStopped{} },
	TypeBudgetRaise:       func() any { return &BudgetRaise{} },
	TypeSessionPaused:     func() any { return &SessionPaused{} },
	TypeSessionResumed:    func() any { return &SessionResumed{} },
	TypeContextCompacted:  func() any { return &ContextCompacted{} },
}

// Parse reads a message's "type" and decodes it into the matching type,
// returned as a pointer. It fails on malformed JSON and on unknown types.
func Parse(data []byte) (any, error) {
	var probe struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("decode message: %w", err)
	}
	mk, ok := registry[probe.Type]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownType, probe.Type)
	}
	v := mk()
	if err := json.Unmarshal(data, v); err != nil {
		return nil, fmt.Errorf("decode %s: %w", probe.Type, err)
	}
	return v, nil
}

// Types returns every registered type name.
func Types() []string {
	out := make([]string, 0, len(registry))
	for t := range registry {
		out = append(out, t)
	}
	return out
}
