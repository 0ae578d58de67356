package egress

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/egressapi"
	"corral.dev/pkg/event"
	"corral.dev/pkg/sessionlog"
	"corral.dev/services/egress/internal/proxy"
)

// States of a held request.
const (
	heldPending  = "pending"
	heldApproved = "approved"
	heldDenied   = "denied"
	heldUsed     = "used"
)

// held is a request the policy held for a reviewer, as kept in the egress
// bucket under <tenant>.<session>.<approval>; <tenant>.<session>.b-<binding>
// holds the approval of the request a binding names, so that the same
// request retried finds its approval.
type held struct {
	Approval  uuid.UUID `json:"approval"`
	Binding   string    `json:"binding"`
	ArgsHash  string    `json:"args_hash"`
	State     string    `json:"state"`
	Published bool      `json:"published,omitempty"`
	Reviewer  string    `json:"reviewer,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	At        time.Time `json:"at"`
}

// holder keeps the requests the policy holds: each becomes an approval
// request in the session's log, which reviewers decide like a held call;
// a signed approval lets exactly that request through, once.
type holder struct {
	kv   jetstream.KeyValue
	logs *sessionlog.Log
	key  ed25519.PublicKey
	log  *slog.Logger
}

// heldInput is what a reviewer sees of a held request, and what a
// decision is bound to.
type heldInput struct {
	Method       string            `json:"method"`
	URL          string            `json:"url"`
	ContentType  string            `json:"content_type,omitempty"`
	Refs         []proxy.RefUpdate `json:"refs,omitempty"`
	Capabilities string            `json:"capabilities,omitempty"`
	BodySHA256   string            `json:"body_sha256,omitempty"`
}

// Check says whether a reviewer approved the request h, which then passes
// once; otherwise it returns the approval h waits on, asked for the
// first time h is seen. See [proxy.Holder].
func (h *holder) Check(ctx context.Context, id egressapi.Identity, r proxy.Held) (bool, uuid.UUID, error) {
	in := heldInput{Method: r.Method, URL: r.URL, ContentType: r.ContentType, Refs: r.Refs, Capabilities: r.Capabilities, BodySHA256: r.BodySHA256}
	input, err := json.Marshal(in)
	if err != nil {
		return false, uuid.Nil, err
	}
	sum := sha256.Sum256(append([]byte(id.Tenant+"\x00"+id.Session.String()+"\x00"), input...))
	binding := hex.EncodeToString(sum[:])
	prefix := bus.SessionKey(id.Tenant, id.Session) + "."
	for range 5 {
		ref, err := h.kv.Get(ctx, prefix+"b-"+binding)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return h.ask(ctx, id, r, input, binding)
		}
		if err != nil {
			return false, uuid.Nil, err
		}
		approval, err := uuid.ParseBytes(ref.Value())
		if err != nil {
			return false, uuid.Nil, fmt.Errorf("held request %s: %w", binding, err)
		}
		e, err := h.kv.Get(ctx, prefix+approval.String())
		if err != nil {
			return false, uuid.Nil, fmt.Errorf("held request %s: %w", approval, err)
		}
		var rec held
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			return false, uuid.Nil, fmt.Errorf("held request %s: %w", approval, err)
		}
		switch rec.State {
		case heldApproved:
			rec.State, rec.At = heldUsed, time.Now().UTC()
			data, _ := json.Marshal(rec)
			if _, err := h.kv.Update(ctx, prefix+approval.String(), data, e.Revision()); bus.Conflict(err) {
				continue // decided or used meanwhile: look again
			} else if err != nil {
				return false, uuid.Nil, fmt.Errorf("held request %s: %w", approval, err)
			}
			h.log.InfoContext(ctx, "held request passes", "tenant", id.Tenant, "session", id.Session, "approval", approval)
			return true, approval, nil
		case heldUsed:
			// Passed once already: the same request again is a new one.
			if err := h.kv.Delete(ctx, prefix+"b-"+binding, jetstream.LastRevision(ref.Revision())); bus.Conflict(err) {
				continue
			} else if err != nil {
				return false, uuid.Nil, fmt.Errorf("held request %s: %w", binding, err)
			}
			return h.ask(ctx, id, r, input, binding)
		case heldPending:
			if !rec.Published {
				if err := h.publish(ctx, id, r, input, &rec, prefix, e.Revision()); err != nil {
					return false, uuid.Nil, err
				}
			}
		}
		return false, approval, nil
	}
	return false, uuid.Nil, fmt.Errorf("held request %s changed under every attempt", binding)
}

// ask keeps a new held request and asks reviewers about it.
func (h *holder) ask(ctx context.Context, id egressapi.Identity, r proxy.Held, input []byte, binding string) (bool, uuid.UUID, error) {
	prefix := bus.SessionKey(id.Tenant, id.Session) + "."
	approval := uuid.Must(uuid.NewV7())
	rec := held{Approval: approval, Binding: binding, ArgsHash: event.ArgsHash(event.EgressTool, input), State: heldPending, At: time.Now().UTC()}
	data, _ := json.Marshal(rec)
	rev, err := h.kv.Create(ctx, prefix+approval.String(), data)
	if err != nil {
		return false, uuid.Nil, fmt.Errorf("keep held request: %w", err)
	}
	if _, err := h.kv.Create(ctx, prefix+"b-"+binding, []byte(approval.String())); err != nil {
		// Another retry of the same request got there first: wait on its.
		_ = h.kv.Delete(ctx, prefix+approval.String())
		if errors.Is(err, jetstream.ErrKeyExists) {
			ref, err := h.kv.Get(ctx, prefix+"b-"+binding)
			if err != nil {
				return false, uuid.Nil, err
			}
			a, err := uuid.ParseBytes(ref.Value())
			return false, a, err
		}
		return false, uuid.Nil, fmt.Errorf("keep held request: %w", err)
	}
	if err := h.publish(ctx, id, r, input, &rec, prefix, rev); err != nil {
		return false, uuid.Nil, err
	}
	return false, approval, nil
}

// publish asks reviewers about rec in the session's log, then notes that
// it did (a request retried after a failure here asks again, under the
// same ID, which the log and the approval service take once).
func (h *holder) publish(ctx context.Context, id egressapi.Identity, r proxy.Held, input []byte, rec *held, prefix string, rev uint64) error {
	ev := &event.ApprovalRequested{
		Header:   event.NewHeader(event.TypeApprovalRequested, id.Tenant, id.Session),
		Call:     rec.Approval,
		User:     id.User,
		Tool:     event.EgressTool,
		Input:    input,
		ArgsHash: rec.ArgsHash,
		Rule:     r.Rule,
		Reason:   r.Reason,
	}
	if err := h.logs.Record(ctx, ev, "egress:"+rec.Approval.String()); err != nil && !errors.Is(err, sessionlog.ErrDuplicate) {
		return fmt.Errorf("ask for approval %s: %w", rec.Approval, err)
	}
	rec.Published = true
	data, _ := json.Marshal(rec)
	if _, err := h.kv.Update(ctx, prefix+rec.Approval.String(), data, rev); err != nil {
		h.log.WarnContext(ctx, "note approval asked", "approval", rec.Approval, "err", err)
	}
	h.log.InfoContext(ctx, "request held for a reviewer", "tenant", id.Tenant, "session", id.Session, "approval", rec.Approval, "method", r.Method, "url", r.URL, "rule", r.Rule)
	return nil
}

// decided takes a reviewer's decision from a session's log. One on an
// approval of this service's is kept if its signature verifies for the
// approval's very request; any other is none of its business.
func (h *holder) decided(ctx context.Context, en sessionlog.Entry, d *event.ApprovalDecided) error {
	key := bus.CallKey(en.Tenant, en.Session, d.Call)
	e, err := h.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	var rec held
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return fmt.Errorf("%w: held request %s: %v", bus.ErrPermanent, key, err)
	}
	if rec.State != heldPending {
		return nil // a redelivery, or decided twice: the first one stands
	}
	if err := d.Verify(h.key, en.Tenant, en.Session, d.Call, rec.ArgsHash); err != nil {
		h.log.WarnContext(ctx, "decision on a held request ignored", "tenant", en.Tenant, "session", en.Session, "approval", d.Call, "err", err)
		return nil
	}
	rec.State, rec.Reviewer, rec.Reason, rec.At = heldDenied, d.Reviewer, d.Reason, time.Now().UTC()
	if d.Approved {
		rec.State = heldApproved
	}
	data, _ := json.Marshal(rec)
	if _, err := h.kv.Update(ctx, key, data, e.Revision()); err != nil {
		return fmt.Errorf("keep decision on %s: %w", key, err)
	}
	h.log.InfoContext(ctx, "held request decided", "tenant", en.Tenant, "session", en.Session, "approval", d.Call, "state", rec.State, "reviewer", d.Reviewer)
	return nil
}
