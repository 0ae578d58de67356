package upload

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
)

// What a client that stages one file at a time uses (the HTTP API's
// Files API), besides [Upload] of a whole tree: a content staged, read
// back, and a list of contents staged already.

// StageContent stages the content of size bytes whose SHA-256 (hex) is
// hash, read from r, for user of tenant, and returns when it was stored:
// it is kept [bus.UploadMaxAge] from then. Unlike [Upload], it sends the
// content even if it is staged already, so that it is kept that long from
// now; sent again within the stream's duplicate window, it is stored once,
// and the time returned is the first time's. A content that does not
// match size and hash is an error, and nothing of it is taken for whole.
// An empty content is never staged: it needs nothing.
func StageContent(ctx context.Context, js jetstream.JetStream, tenant, user, hash string, size int64, r io.Reader) (time.Time, error) {
	if !isHash(hash) || size < 0 || size > MaxBytes {
		return time.Time{}, fmt.Errorf("stage a content: want a SHA-256 in hex and 0 to %d bytes", int64(MaxBytes))
	}
	if size == 0 {
		if hash != emptyHash {
			return time.Time{}, errChanged
		}
		return time.Now(), nil
	}
	u := &uploader{js: js, tenant: tenant, user: bus.UserToken(user), slots: make(chan struct{}, inFlight)}
	if err := u.send(ctx, hash, size, r); err != nil {
		return time.Time{}, err
	}
	// The first chunk is the oldest: it says when the content expires.
	m, err := bus.LastBySubject(ctx, js, bus.StreamUploads, bus.UploadSubject(tenant, u.user, hash, 0))
	if err != nil {
		return time.Time{}, fmt.Errorf("read back a staged content: %w", err)
	}
	return m.Stored, nil
}

// StageList checks l and stages it for user of tenant, as [Upload] stages
// a tree's list, and returns its ref. Its contents must be staged already
// (see [StageContent]) for [Layout] to lay it out.
func StageList(ctx context.Context, js jetstream.JetStream, tenant, user string, l *List) (string, error) {
	if err := l.Check(); err != nil {
		return "", err
	}
	ref, data, err := l.Ref()
	if err != nil {
		return "", err
	}
	hash, _ := ParseRef(ref)
	u := &uploader{js: js, tenant: tenant, user: bus.UserToken(user), slots: make(chan struct{}, inFlight)}
	_, err = u.ensure(ctx, "the file list", hash, int64(len(data)), func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
	return ref, err
}

// ReadContent writes to w the content hash of size bytes that user of
// tenant staged, from its chunks, checking each chunk's length and, at
// the end, the content's size and hash. A content not staged whole
// (never, by another user, or expired) is an error matching
// [ErrRefused] before anything is written; name says what it is in
// errors.
func ReadContent(ctx context.Context, chunks Chunks, tenant, user, hash string, size int64, name string, w io.Writer) error {
	if size == 0 {
		return nil
	}
	r := &reader{chunks: chunks, tenant: tenant, user: bus.UserToken(user)}
	// Its last chunk, sent once every other was stored, says it is whole.
	last := bus.UploadSubject(tenant, r.user, hash, chunkCount(size)-1)
	rctx, cancel := bus.Bound(ctx)
	_, err := chunks.GetLastMsgForSubject(rctx, last)
	cancel()
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return refuse("%s is no longer staged (uploads are kept %d days)", name, int(bus.UploadMaxAge.Hours()/24))
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", last, err)
	}
	return r.copy(ctx, w, hash, size, name)
}

// DirectChunks reads staged chunks through js by direct gets whose
// subject names the chunk's, which a client's permissions allow for its
// own uploads (a [jetstream.Stream] would look the stream up first, which
// they do not allow).
func DirectChunks(js jetstream.JetStream) Chunks { return directChunks{js} }

type directChunks struct{ js jetstream.JetStream }

func (d directChunks) GetLastMsgForSubject(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	api := "$JS.API.DIRECT.GET." + bus.StreamUploads + "." + subject
	ctx, stop := bus.WhilePermitted(ctx, d.js.Conn(), api)
	defer stop()
	resp, err := d.js.Conn().RequestWithContext(ctx, api, nil)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", subject, bus.Refusal(ctx, err))
	}
	switch resp.Header.Get("Status") {
	case "":
	case "404":
		return nil, fmt.Errorf("read %s: %w", subject, jetstream.ErrMsgNotFound)
	default:
		return nil, fmt.Errorf("read %s: %s %s", subject, resp.Header.Get("Status"), resp.Header.Get("Description"))
	}
	seq, _ := strconv.ParseUint(resp.Header.Get(jetstream.SequenceHeader), 10, 64)
	return &jetstream.RawStreamMsg{Subject: subject, Sequence: seq, Header: resp.Header, Data: resp.Data}, nil
}
