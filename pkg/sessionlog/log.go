package sessionlog

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
)

// Log reads and writes session logs as one identity.
type Log struct {
	js jetstream.JetStream
	o  Options

	mu     sync.Mutex
	stream jetstream.Stream
	judged *judged
}

// Options configure a [Log].
type Options struct {
	// As is the writer token the Log writes under: the service's own.
	// A client's Log writes nothing.
	As Writer
	// Reader names the reader in dead letters and logs: the service
	// ("harness"), or "client".
	Reader string
	// DeadLetters, when set, copies each event the Log rejects to the
	// DEADLETTER stream (services may publish there; clients may not).
	DeadLetters bool
	// Client, when set, reads only as a client's permissions allow:
	// through consumers and direct gets whose subjects name what they
	// read, never by batched direct gets.
	Client bool
	// IDKey, when set, keys the message IDs the Log writes under: each is
	// a keyed hash (HMAC-SHA256) of the ID its caller gives, the same
	// every time, so that a retried write is still dropped as a
	// duplicate. The stream drops a message whose ID it has stored within
	// its window, on any subject: a writer that could tell the ID of the
	// Log's next event could store a message under it first, and have
	// the event dropped. One that does not hold the key cannot.
	IDKey  []byte
	Logger *slog.Logger
}

// New returns a Log of the session logs in js's EVENTS stream.
func New(js jetstream.JetStream, o Options) *Log {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Reader == "" {
		o.Reader = string(o.As)
	}
	return &Log{js: js, o: o, judged: newJudged()}
}

// Entry is an event read from a session's log and accepted.
type Entry struct {
	Address
	Subject string
	Seq     uint64
	Event   event.Event
}

// events returns the EVENTS stream's handle, looked up once.
func (l *Log) events(ctx context.Context) (jetstream.Stream, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stream != nil {
		return l.stream, nil
	}
	ctx, cancel := bus.Bound(ctx)
	defer cancel()
	s, err := l.js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		return nil, fmt.Errorf("open stream %s: %w", bus.StreamEvents, err)
	}
	l.stream = s
	return s, nil
}

// Judge resolves and judges one message of the EVENTS stream, as a
// consumer received it. A message it rejects is counted, logged once and,
// when the Log says so, dead-lettered; the error matches [ErrRejected]
// (and [bus.ErrRejected], so that a consumer's handler may return it as
// it is). Other errors (the payloads store out of reach) are worth a
// retry.
func (l *Log) Judge(ctx context.Context, m bus.Msg) (Entry, error) {
	if m.Spoofed != "" {
		return Entry{}, l.rejected(ctx, m, reject(ReasonSpoofed, "the message carries the server's %s header itself: an echo of a stream's answer, or a forgery", m.Spoofed))
	}
	a, err := ParseSubject(m.Subject)
	if err != nil {
		return Entry{}, l.rejected(ctx, m, err)
	}
	data, err := resolve(ctx, l.js, a.Tenant, m.Data)
	if err != nil {
		if errors.Is(err, ErrRejected) {
			return Entry{}, l.rejected(ctx, m, err)
		}
		return Entry{}, err
	}
	ev, err := Check(a, data)
	if err != nil {
		return Entry{}, l.rejected(ctx, m, err)
	}
	return Entry{Address: a, Subject: m.Subject, Seq: m.StreamSeq, Event: ev}, nil
}

// Admit is [Session.Admit] for an entry that [Log.Judge] accepted, with
// the Log's handling of a rejection: it is dead-lettered. An entry passed
// over with [ErrFolded] is not.
func (l *Log) Admit(ctx context.Context, s *Session, e Entry, data []byte) error {
	if err := s.Admit(e.Address, e.Event); err != nil {
		if errors.Is(err, ErrFolded) {
			return err
		}
		return l.rejected(ctx, bus.Msg{Subject: e.Subject, StreamSeq: e.Seq, Data: data}, err)
	}
	return nil
}

// Read returns the events of s's session stored after sequence after,
// oldest first, each accepted by [Check] and by s, which learns from each:
// s must have folded the log up to after (a fresh [NewSession] for 0).
// Rejected events are left out.
func (l *Log) Read(ctx context.Context, s *Session, after uint64) ([]Entry, error) {
	msgs, err := l.read(ctx, bus.SessionEvents(s.Tenant, s.ID), after)
	if err != nil {
		return nil, err
	}
	return l.judgeAll(ctx, s, msgs)
}

// read returns the messages matching filter after sequence after, as the
// Log's permissions allow.
func (l *Log) read(ctx context.Context, filter string, after uint64) ([]bus.Msg, error) {
	if l.o.Client {
		return bus.ReadByConsumer(ctx, l.js, bus.StreamEvents, filter, after)
	}
	if after == 0 {
		return bus.ReadAll(ctx, l.js, bus.StreamEvents, filter)
	}
	stream, err := l.events(ctx)
	if err != nil {
		return nil, err
	}
	return bus.ReadAfter(ctx, l.js, stream, filter, after)
}

// ReadAll returns every accepted event of a session, oldest first, and
// what they say of it.
func (l *Log) ReadAll(ctx context.Context, tenant string, session uuid.UUID) ([]Entry, *Session, error) {
	s := NewSession(tenant, session)
	msgs, err := l.read(ctx, bus.SessionEvents(tenant, session), 0)
	if err != nil {
		return nil, nil, err
	}
	out, err := l.judgeAll(ctx, s, msgs)
	return out, s, err
}

func (l *Log) judgeAll(ctx context.Context, s *Session, msgs []bus.Msg) ([]Entry, error) {
	out := make([]Entry, 0, len(msgs))
	for _, m := range msgs {
		e, err := l.Judge(ctx, m)
		if errors.Is(err, ErrRejected) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if s != nil {
			if err := l.Admit(ctx, s, e, m.Data); err != nil {
				continue
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// Last returns the last accepted event of a session of one of types
// (lifecycle events, say), and false when there is none. It reads only
// that event unless it is rejected or is a tool result (which is judged
// by what came before it in the log).
func (l *Log) Last(ctx context.Context, tenant string, session uuid.UUID, types ...string) (Entry, bool, error) {
	filter := bus.SessionEvents(tenant, session)
	if len(types) == 1 {
		filter = SessionKind(tenant, session, types[0])
	}
	m, err := bus.LastBySubject(ctx, l.js, bus.StreamEvents, filter)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, err
	}
	if len(types) == 1 {
		e, err := l.Judge(ctx, m)
		if err == nil && e.Type != event.TypeToolCompleted {
			return e, true, nil
		}
		if err != nil && !errors.Is(err, ErrRejected) {
			return Entry{}, false, err
		}
	}
	// A result (judged by what came before it), a rejected event, or
	// several types: fold the session to judge them all.
	all, _, err := l.ReadAll(ctx, tenant, session)
	if err != nil {
		return Entry{}, false, err
	}
	for i := len(all) - 1; i >= 0; i-- {
		for _, t := range types {
			if all[i].Type == t {
				return all[i], true, nil
			}
		}
	}
	return Entry{}, false, nil
}

// First returns the first accepted event of type typ of a session (its
// first request, say), and false when there is none.
func (l *Log) First(ctx context.Context, tenant string, session uuid.UUID, typ string) (Entry, bool, error) {
	filter := SessionKind(tenant, session, typ)
	if l.o.Client {
		msgs, err := l.read(ctx, filter, 0)
		if err != nil {
			return Entry{}, false, err
		}
		for _, m := range msgs {
			e, err := l.Judge(ctx, m)
			if err == nil {
				return e, true, nil
			}
			if !errors.Is(err, ErrRejected) {
				return Entry{}, false, err
			}
		}
		return Entry{}, false, nil
	}
	stream, err := l.events(ctx)
	if err != nil {
		return Entry{}, false, err
	}
	for seq := uint64(1); ; {
		rctx, cancel := bus.Bound(ctx)
		raw, err := stream.GetMsg(rctx, seq, jetstream.WithGetMsgSubject(filter))
		cancel()
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return Entry{}, false, nil
		}
		if err != nil {
			return Entry{}, false, fmt.Errorf("read %s: %w", filter, err)
		}
		m := bus.FromRaw(raw)
		e, err := l.Judge(ctx, m)
		if err == nil {
			return e, true, nil
		}
		if !errors.Is(err, ErrRejected) {
			return Entry{}, false, err
		}
		seq = m.StreamSeq + 1
	}
}

// Record appends ev to its session's log under msgID (deduplicated within
// the stream's window), written as the Log's writer. The message ID the
// server sees is msgID within the session's key: the duplicate window is
// the whole stream's, and one tenant's session IDs may be another's. An event larger than
// [OffloadThreshold] is stored in the payloads store and the log gets a
// stub.
//
// A publish the server drops as a duplicate of msgID returns an error
// wrapping [ErrDuplicate]: the event was recorded before, maybe not with
// this content. Most callers treat that as success.
func (l *Log) Record(ctx context.Context, ev event.Event, msgID string) error {
	_, err := l.record(ctx, ev, msgID)
	return err
}

// Append is [Log.Record] on the condition that the last event of ev's
// session is the one at stream sequence after (0: the session has none).
// It returns the sequence ev was stored at, or an error wrapping
// [ErrNotLast] when another event came after that one; ev is then not
// recorded. A writer that folded its session's log up to after and
// appends this way knows the log up to the new event without reading it
// back.
func (l *Log) Append(ctx context.Context, ev event.Event, msgID string, after uint64) (uint64, error) {
	h := ev.Head()
	ack, err := l.record(ctx, ev, msgID, jetstream.WithExpectLastSequenceForSubject(after, bus.SessionEvents(h.Tenant, h.Session)))
	if bus.Conflict(err) {
		return 0, fmt.Errorf("%w: %w", ErrNotLast, err)
	}
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// ErrNotLast is returned by [Log.Append] when the session's log has an
// event after the one it was to follow.
var ErrNotLast = errors.New("not the last event of the session")

// ErrDuplicate is returned by [Log.Record] when the server already has an
// event under the same message ID.
var ErrDuplicate = errors.New("recorded already")

// encode returns the subject and payload of ev as the Log writes it: the
// event, or the stub of it stored in the payloads store.
func (l *Log) encode(ctx context.Context, ev event.Event) (string, []byte, error) {
	h := ev.Head()
	subject := Subject(h.Tenant, h.Session, h.Type, l.o.As)
	data, err := json.Marshal(ev)
	if err != nil {
		return "", nil, fmt.Errorf("encode %s: %w", subject, err)
	}
	if len(data) > OffloadThreshold {
		if data, err = offload(ctx, l.js, h, data); err != nil {
			return "", nil, fmt.Errorf("offload %s: %w", subject, err)
		}
	}
	return subject, data, nil
}

// IDKeyFrom returns an [Options.IDKey] drawn from a service's private
// key, for use (a label of what the IDs are of): the same in every
// replica of the service, which all hold the key, and in no other.
func IDKeyFrom(use string, key ed25519.PrivateKey) []byte {
	if key == nil {
		return nil
	}
	k := sha256.Sum256(append([]byte(use+"\x00"), key.Seed()...))
	return k[:]
}

// msgID is the message ID the Log writes the event id names under: id
// within the session's key, keyed (see [Options.IDKey]).
func (l *Log) msgID(tenant string, session uuid.UUID, id string) string {
	key := bus.SessionKey(tenant, session)
	if len(l.o.IDKey) == 0 {
		return key + ":" + id
	}
	mac := hmac.New(sha256.New, l.o.IDKey)
	mac.Write([]byte(key + ":" + id))
	return key + ":" + hex.EncodeToString(mac.Sum(nil))
}

func (l *Log) record(ctx context.Context, ev event.Event, msgID string, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	ctx, cancel := bus.Bound(ctx)
	defer cancel()
	h := ev.Head()
	subject, data, err := l.encode(ctx, ev)
	if err != nil {
		return nil, err
	}
	ack, err := l.js.Publish(ctx, subject, data, append(opts, jetstream.WithMsgID(l.msgID(h.Tenant, h.Session, msgID)))...)
	if err != nil {
		return nil, fmt.Errorf("publish %s: %w", subject, err)
	}
	if ack.Duplicate {
		return nil, fmt.Errorf("%w: %s %s", ErrDuplicate, subject, msgID)
	}
	return ack, nil
}
