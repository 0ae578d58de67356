package upload

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"corral.dev/pkg/bus"
)

// Stats says what [Upload] found and sent.
type Stats struct {
	// Files and Bytes count the tree's regular files and their bytes.
	Files int
	Bytes int64
	// Blobs counts the files' contents sent, those not staged already
	// (a content several files hold, once), and Sent the bytes sent, the
	// list's among them.
	Blobs int
	Sent  int64
}

// How much [Upload] does at once: contents looked up or sent, and chunks
// in flight (at most inFlight of [bus.UploadChunkBytes] each, besides one
// last chunk a content).
const (
	parallel = 16
	inFlight = 16
)

// freshFor is how old a staged content may be and still not be sent
// again: it is kept [bus.UploadMaxAge], and the session that names it
// must find it whole when its workspace is prepared.
const freshFor = bus.UploadMaxAge - 24*time.Hour

// Upload stages the folder, or the .tar, .tar.gz, .tgz or .zip archive,
// at path for a session of user of tenant to start from, and returns the
// ref a request names it by (its Files). Modes are kept, and
// symlinks are uploaded as symlinks, never followed; anything else that
// is not a directory or a regular file is an error naming it, as is a
// tree over [MaxEntries] or [MaxBytes]. Each content is sent once, in
// parallel, unless it is staged already; the list is sent last, so that a
// list staged says its contents were. A file that changes while it is
// uploaded is an error, and what was sent of it is never taken for whole.
// js may be a client's: Upload publishes and reads only on
// [bus.UploadFilter] of tenant and user.
func Upload(ctx context.Context, js jetstream.JetStream, tenant, user, path string) (string, Stats, error) {
	t, err := openTree(path)
	if err != nil {
		return "", Stats{}, err
	}
	defer t.close()
	if err := t.list.Check(); err != nil {
		return "", Stats{}, fmt.Errorf("%s: %w", path, err)
	}
	var st Stats
	_, st.Files, st.Bytes = t.list.Totals()
	ref, data, err := t.list.Ref()
	if err != nil {
		return "", Stats{}, err
	}
	u := &uploader{js: js, tenant: tenant, user: bus.UserToken(user), slots: make(chan struct{}, inFlight)}

	// Each content once; an empty file's, never.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	sending := make(map[string]bool)
	for _, e := range t.list.Files {
		if e.Mode.Type() != 0 || e.Size == 0 || sending[e.Hash] {
			continue
		}
		sending[e.Hash] = true
		g.Go(func() error {
			sent, err := u.ensure(gctx, e.Path, e.Hash, e.Size, func() (io.ReadCloser, error) { return t.open(e) })
			if sent {
				u.blobs.Add(1)
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return "", Stats{}, err
	}
	listHash, _ := ParseRef(ref)
	_, err = u.ensure(ctx, "the file list", listHash, int64(len(data)), func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
	if err != nil {
		return "", Stats{}, err
	}
	st.Blobs, st.Sent = int(u.blobs.Load()), u.sent.Load()
	return ref, st, nil
}

// uploader sends contents to the staging stream as tenant's user (a
// [bus.UserToken]).
type uploader struct {
	js           jetstream.JetStream
	tenant, user string
	// slots bounds the chunks in flight.
	slots       chan struct{}
	blobs, sent atomic.Int64
}

// ensure sends the content hash of size bytes, read from what open
// returns, unless it is staged already and fresh, and reports whether it
// sent it. name says what it is in errors.
func (u *uploader) ensure(ctx context.Context, name, hash string, size int64, open func() (io.ReadCloser, error)) (bool, error) {
	staged, err := u.staged(ctx, hash, size)
	if err != nil || staged {
		return false, err
	}
	r, err := open()
	if err != nil {
		return false, err
	}
	defer r.Close()
	if err := u.send(ctx, hash, size, r); err != nil {
		return false, fmt.Errorf("upload %s: %w", name, err)
	}
	u.sent.Add(size)
	return true, nil
}

// staged reports whether the content hash of size bytes is staged, whole
// and fresh: its last chunk, sent only once every other was stored, is
// there, and was stored within [freshFor].
func (u *uploader) staged(ctx context.Context, hash string, size int64) (bool, error) {
	n := chunkCount(size)
	m, err := bus.LastBySubject(ctx, u.js, bus.StreamUploads, bus.UploadSubject(u.tenant, u.user, hash, n-1))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up an upload: %w", err)
	}
	return len(m.Data) == chunkLen(size, n-1) && time.Since(m.Stored) < freshFor, nil
}

// send cuts r's content, of size bytes whose hash is hash, in chunks and
// publishes them, several at once: the last one once the others are
// stored, and only if what was read matches size and hash, so that a
// content whose last chunk is staged is whole. A content that does not
// match (its file changed since it was hashed) is an error.
func (u *uploader) send(ctx context.Context, hash string, size int64, r io.Reader) error {
	n := chunkCount(size)
	g, gctx := errgroup.WithContext(ctx)
	h := sha256.New()
	var last []byte
	for i := range n {
		buf := make([]byte, chunkLen(size, i))
		if _, err := io.ReadFull(r, buf); err != nil {
			werr := g.Wait()
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				err = errChanged
			}
			return errors.Join(err, werr)
		}
		h.Write(buf)
		if i == n-1 {
			last = buf
			break
		}
		select {
		case u.slots <- struct{}{}:
		case <-gctx.Done():
			return errors.Join(g.Wait(), ctx.Err())
		}
		g.Go(func() error {
			defer func() { <-u.slots }()
			return u.publish(gctx, hash, size, i, buf)
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	// Nothing more to read, and what was read is the content hashed.
	if k, _ := r.Read(make([]byte, 1)); k > 0 || hex.EncodeToString(h.Sum(nil)) != hash {
		return errChanged
	}
	return u.publish(ctx, hash, size, n-1, last)
}

// publish stores chunk i of the content hash of size bytes. It sets no
// message ID: the stream's duplicate window spans every subject, so a
// client of another tenant (or another user) could publish first, on its
// own subject, with the ID this chunk would carry (its subject, say), and
// the chunk would be dropped as its duplicate, leaving the upload without
// it. Nothing needs one: the stream keeps one message a subject, so a
// chunk published again (a retry whose acknowledgement was lost) replaces
// the same bytes, and a chunk's subject only its user may publish on.
func (u *uploader) publish(ctx context.Context, hash string, size int64, i int, data []byte) error {
	msg := nats.NewMsg(bus.UploadSubject(u.tenant, u.user, hash, i))
	msg.Data = data
	msg.Header.Set(sizeHeader, strconv.FormatInt(size, 10))
	ctx, cancel := bus.Bound(ctx)
	defer cancel()
	ctx, stop := bus.WhilePermitted(ctx, u.js.Conn(), msg.Subject)
	defer stop()
	if _, err := u.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("publish %s: %w", msg.Subject, bus.Refusal(ctx, err))
	}
	return nil
}
