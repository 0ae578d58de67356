package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// ReadAll returns every message of stream matching filter, oldest first,
// read by batched direct gets until none is left (so those stored while it
// reads as well): a round trip for every [readBatch] messages. Session
// logs are read through package sessionlog, which judges what this
// returns. stream must allow direct gets.
func ReadAll(ctx context.Context, js jetstream.JetStream, stream, filter string) ([]Msg, error) {
	return readBatches(ctx, js, stream, filter, 0, nil)
}

// readBatch is how many messages one batched direct get returns at most.
const readBatch = 256

// numPendingHeader is the header of a batched direct get's answer that
// counts the messages matching after it.
const numPendingHeader = "Nats-Num-Pending"

// readBatches appends to out the messages of stream matching filter stored
// after sequence seq.
func readBatches(ctx context.Context, js jetstream.JetStream, stream, filter string, seq uint64, out []Msg) ([]Msg, error) {
	for {
		batch, more, err := readBatchAfter(ctx, js, stream, filter, seq)
		if err != nil {
			return nil, err
		}
		for _, raw := range batch {
			m := FromRaw(raw)
			out = append(out, m)
			seq = m.StreamSeq
		}
		if !more {
			return out, nil
		}
	}
}

// readBatchAfter reads one batch of the messages of stream matching filter
// stored after sequence seq, and reports whether more match after it.
func readBatchAfter(ctx context.Context, js jetstream.JetStream, stream, filter string, seq uint64) (batch []*jetstream.RawStreamMsg, more bool, err error) {
	rctx, cancel := Bound(ctx)
	defer cancel()
	msgs, err := jetstreamext.GetBatch(rctx, js, stream, readBatch,
		jetstreamext.GetBatchSeq(seq+1), jetstreamext.GetBatchSubject(filter))
	if err != nil {
		return nil, false, fmt.Errorf("read %s after %d: %w", filter, seq, err)
	}
	for raw, err := range msgs {
		if errors.Is(err, jetstreamext.ErrNoMessages) {
			break
		}
		if err != nil {
			return nil, false, fmt.Errorf("read %s after %d: %w", filter, seq, err)
		}
		batch = append(batch, raw)
		// The server counts what matches after each message it sends.
		more = lastValue(raw.Header, numPendingHeader) != "0"
	}
	return batch, more, nil
}

// FromRaw returns a message read from a stream (raw) as a handler sees
// it. A direct get's answer names the message's subject and sequence in
// headers the server writes after those stored with it, which may have the
// same names (see [Msg.Spoofed]): the server's are the last. A stored get's
// answer names them in its body, and its headers are the stored ones
// alone: one naming another subject is spoofed.
func FromRaw(raw *jetstream.RawStreamMsg) Msg {
	m := Msg{Subject: raw.Subject, Data: raw.Data, StreamSeq: raw.Sequence, MsgID: raw.Header.Get(jetstream.MsgIDHeader)}
	m.Spoofed = spoofed(raw.Header, 1)
	switch subjects := raw.Header.Values(jetstream.SubjectHeader); {
	case len(subjects) > 1:
		m.Subject = subjects[len(subjects)-1]
	case len(subjects) == 1 && subjects[0] != raw.Subject:
		m.Spoofed = jetstream.SubjectHeader
	}
	switch seqs := raw.Header.Values(jetstream.SequenceHeader); {
	case len(seqs) > 1:
		seq, err := strconv.ParseUint(seqs[len(seqs)-1], 10, 64)
		if err != nil {
			m.Spoofed = jetstream.SequenceHeader
			break
		}
		m.StreamSeq = seq
	case len(seqs) == 1 && seqs[0] != strconv.FormatUint(raw.Sequence, 10):
		m.Spoofed = jetstream.SequenceHeader
	}
	return m
}

// serverHeaders are the headers the server writes on what it answers from
// a stream: a direct get's answer, a batch's.
var serverHeaders = []string{
	jetstream.StreamHeader, jetstream.SubjectHeader, jetstream.SequenceHeader,
	jetstream.TimeStampHeaer, numPendingHeader, "Nats-Last-Sequence",
}

// spoofed returns the first of serverHeaders that h holds more often than
// the server wrote it: written times, 1 in an answer from a stream (at
// most: those of a batch's answer alone appear in no other) and 0 in a
// consumer's delivery.
func spoofed(h nats.Header, written int) string {
	for _, name := range serverHeaders {
		if len(h.Values(name)) > written {
			return name
		}
	}
	return ""
}

// ReadAfter returns the messages of stream matching filter stored after
// sequence seq, oldest first: what a reader that has read up to seq has
// not seen yet, usually a message or two. It asks for the last message
// matching, then for each message after seq up to that one, a direct get
// each, and for any more than a few in batches ([ReadAll]'s way, whose
// first answer costs the server a count of what matches). Asking for the
// last first spares the server the search, to the end of the stream, for
// a next message that is not there. stream must allow direct gets and be
// looked up once by the caller.
func ReadAfter(ctx context.Context, js jetstream.JetStream, stream jetstream.Stream, filter string, seq uint64) ([]Msg, error) {
	rctx, cancel := Bound(ctx)
	last, err := stream.GetLastMsgForSubject(rctx, filter)
	cancel()
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s after %d: %w", filter, seq, err)
	}
	var out []Msg
	for i := 0; seq < FromRaw(last).StreamSeq; i++ {
		if i == maxSingleGets {
			return readBatches(ctx, js, stream.CachedInfo().Config.Name, filter, seq, out)
		}
		rctx, cancel := Bound(ctx)
		raw, err := stream.GetMsg(rctx, seq+1, jetstream.WithGetMsgSubject(filter))
		cancel()
		if err != nil {
			return nil, fmt.Errorf("read %s after %d: %w", filter, seq, err)
		}
		m := FromRaw(raw)
		out = append(out, m)
		seq = m.StreamSeq
	}
	return out, nil
}

// maxSingleGets is how many messages [ReadAfter] gets one by one before it
// reads the rest in batches.
const maxSingleGets = 4

// ErrBadSubject is returned by [ParseSubject] for a subject that does not
// name a tenant and a session.
var ErrBadSubject = errors.New("subject does not name a tenant and session")

// ParseSubject returns the tenant and session named by a request, event,
// tool or preview subject (requests.<tenant>.<session>.<user>,
// events.<tenant>.<session>.…, tools.<service>.<tenant>.<session>,
// preview.<service>.<tenant>.<session>).
func ParseSubject(subject string) (string, uuid.UUID, error) {
	tok := strings.Split(subject, ".")
	i := 1
	if tok[0] == "tools" || tok[0] == "preview" {
		i = 2
	}
	if len(tok) < i+2 {
		return "", uuid.Nil, fmt.Errorf("%w: %s", ErrBadSubject, subject)
	}
	id, err := uuid.Parse(tok[i+1])
	if err != nil {
		return "", uuid.Nil, fmt.Errorf("%w: %s", ErrBadSubject, subject)
	}
	return tok[i], id, nil
}

// LastBySubject returns the last message of stream on a subject matching
// filter, by a direct get whose subject names the filter (which a
// client's permissions can allow for its own tenant's subjects alone, and
// which needs no look-up of the stream). It returns an error wrapping
// [jetstream.ErrMsgNotFound] when none matches. stream must allow direct
// gets.
func LastBySubject(ctx context.Context, js jetstream.JetStream, stream, filter string) (Msg, error) {
	ctx, cancel := Bound(ctx)
	defer cancel()
	subject := "$JS.API.DIRECT.GET." + stream + "." + filter
	ctx, stop := WhilePermitted(ctx, js.Conn(), subject)
	defer stop()
	resp, err := js.Conn().RequestWithContext(ctx, subject, nil)
	if err != nil {
		return Msg{}, fmt.Errorf("read the last of %s: %w", filter, Refusal(ctx, err))
	}
	switch resp.Header.Get("Status") {
	case "":
	case "404":
		return Msg{}, fmt.Errorf("read the last of %s: %w", filter, jetstream.ErrMsgNotFound)
	default:
		return Msg{}, fmt.Errorf("read the last of %s: %s %s", filter, resp.Header.Get("Status"), resp.Header.Get("Description"))
	}
	// A stored message may carry headers of these names itself (an echo
	// of another direct get's answer, say): the server's come last.
	seq, err := strconv.ParseUint(lastValue(resp.Header, jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return Msg{}, fmt.Errorf("read the last of %s: no sequence in the answer", filter)
	}
	stored, _ := time.Parse(time.RFC3339Nano, lastValue(resp.Header, jetstream.TimeStampHeaer))
	return Msg{Subject: lastValue(resp.Header, jetstream.SubjectHeader), Data: resp.Data, StreamSeq: seq, MsgID: resp.Header.Get(jetstream.MsgIDHeader), Stored: stored, Spoofed: spoofed(resp.Header, 1)}, nil
}

// ReadByConsumer is [ReadAfter] for a reader that may not use batched
// direct gets (a client, whose permissions name the filter of each read):
// the messages of stream matching filter stored after sequence seq, up to
// the last one when it starts, through an ordered consumer whose filter its
// create subject names.
func ReadByConsumer(ctx context.Context, js jetstream.JetStream, stream, filter string, seq uint64) ([]Msg, error) {
	last, err := LastBySubject(ctx, js, stream, filter)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if last.StreamSeq <= seq {
		return nil, nil
	}
	ctx, stop := WhilePermitted(ctx, js.Conn(), ConsumerAPI(stream))
	defer stop()
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}}
	if seq > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, seq+1
	}
	cons, err := js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("read %s after %d: %w", filter, seq, Refusal(ctx, err))
	}
	defer DeleteOrdered(ctx, js, stream, cons)
	// One pull subscription for the whole read: an ordered consumer's
	// Next or Fetch makes a new consumer on the server each time (and
	// deletes the one before), two API requests a message, each a change
	// of the meta layer in a cluster.
	it, err := cons.Messages(jetstream.PullMaxMessages(readPull), jetstream.PullHeartbeat(PullHeartbeat))
	if err != nil {
		return nil, fmt.Errorf("read %s after %d: %w", filter, seq, Refusal(ctx, err))
	}
	defer it.Stop()
	var out []Msg
	for {
		rctx, cancel := Bound(ctx)
		msg, err := it.Next(jetstream.NextContext(rctx))
		cancel()
		if err != nil {
			return nil, fmt.Errorf("read %s after %d: %w", filter, seq, Refusal(ctx, err))
		}
		meta, err := msg.Metadata()
		if err != nil {
			return nil, fmt.Errorf("read %s after %d: %w", filter, seq, err)
		}
		out = append(out, FromDelivery(msg))
		if meta.Sequence.Stream >= last.StreamSeq {
			return out, nil
		}
	}
}

// DeleteOrdered deletes the consumer on the server that cons, an ordered
// consumer of stream, reads through at the moment: a reader done with it
// drops it at once rather than leave it to the server until it has been
// idle, since a client may have only so many at once (see the auth
// service's gate).
func DeleteOrdered(ctx context.Context, js jetstream.JetStream, stream string, cons jetstream.Consumer) {
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = js.DeleteConsumer(ctx, stream, info.Name)
}

// readPull is how many messages [ReadByConsumer] asks for at a time, and
// so holds at most before they are read: a bound in messages, not bytes,
// so that a message larger than any bound still comes.
const readPull = 64

// lastValue returns the last value of header key in h.
func lastValue(h nats.Header, key string) string {
	v := h.Values(key)
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}
