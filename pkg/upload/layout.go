package upload

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"corral.dev/pkg/bus"
)

// Chunks reads staged chunks by subject: the UPLOADS stream
// ([jetstream.Stream], which reads by direct gets).
type Chunks interface {
	GetLastMsgForSubject(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error)
}

// Bounds bound what [Layout] lays out; a zero field bounds nothing.
type Bounds struct {
	// Entries bounds the directories, files and symlinks.
	Entries int
	// Bytes bounds the bytes of the files.
	Bytes int64
}

// ErrRefused matches every error of [Layout] that is the upload's own, and
// that trying again would meet again: a list or content that is not
// staged (never uploaded, uploaded by another user, or expired), that does
// not match its hash, or is incomplete; a list naming a path it may not;
// a list over the [Bounds] (a [*QuotaError]). Its message says which; the
// error's own is that message alone.
var ErrRefused = errors.New("upload refused")

// refusal is an error matching [ErrRefused].
type refusal struct{ msg string }

func (e *refusal) Error() string        { return e.msg }
func (e *refusal) Is(target error) bool { return target == ErrRefused }

func refuse(format string, args ...any) error {
	return &refusal{msg: fmt.Sprintf(format, args...)}
}

// QuotaError is [Layout]'s error for a list over its [Bounds]: what the
// list holds, and the bounds. It matches [ErrRefused].
type QuotaError struct {
	Entries int
	Bytes   int64
	Bounds  Bounds
}

func (e *QuotaError) Error() string {
	if e.Bounds.Entries > 0 && e.Entries > e.Bounds.Entries {
		return fmt.Sprintf("the uploaded files are over the workspace quota: %d files, directories and symlinks, at most %d", e.Entries, e.Bounds.Entries)
	}
	return fmt.Sprintf("the uploaded files are over the workspace quota: %d bytes, at most %d", e.Bytes, e.Bounds.Bytes)
}

func (e *QuotaError) Is(target error) bool { return target == ErrRefused }

// layoutParallel is how many files [Layout] writes at once.
const layoutParallel = 8

// Layout lays out in dir the upload ref ("sha256:<hex>" of its [List])
// that user of tenant staged, and returns how many regular files it wrote
// and their bytes. dir is made if it is missing, and emptied if it is not
// (a layout tried again finds what the last try left). Each content is
// read from the chunks user staged, and only from them (see
// [reader.copy]), and is checked against its size and hash before it is
// kept; the list is checked too, and so is every path in it, before
// anything is written. Nothing is written outside dir: each entry's parent
// is a directory made here, files are created only where nothing was
// (never through a symlink), and symlinks are made last, as they are
// listed, and never followed. Only permission bits are applied.
//
// An error matching [ErrRefused] is the upload's own; any other (the
// stream or store unreachable, the disk full) may pass when tried again.
func Layout(ctx context.Context, chunks Chunks, tenant, user, ref, dir string, b Bounds) (files int, bytes int64, err error) {
	r := &reader{chunks: chunks, tenant: tenant, user: bus.UserToken(user)}
	l, err := r.list(ctx, ref)
	if err != nil {
		return 0, 0, err
	}
	entries, files, bytes := l.Totals()
	if (b.Entries > 0 && entries > b.Entries) || (b.Bytes > 0 && bytes > b.Bytes) {
		return 0, 0, &QuotaError{Entries: entries, Bytes: bytes, Bounds: b}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, 0, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0, 0, err
	}
	defer root.Close()
	if err := empty(root); err != nil {
		return 0, 0, fmt.Errorf("empty %s: %w", dir, err)
	}
	// Directories first, each before what it holds (the list is in that
	// order), writable by us until the end.
	for _, e := range l.Files {
		if e.Mode.IsDir() {
			if err := root.Mkdir(filepath.FromSlash(e.Path), 0o700); err != nil {
				return 0, 0, err
			}
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(layoutParallel)
	for _, e := range l.Files {
		if e.Mode.Type() == 0 {
			g.Go(func() error { return r.write(gctx, root, e) })
		}
	}
	if err := g.Wait(); err != nil {
		return 0, 0, err
	}
	for _, e := range l.Files {
		if e.Mode.Type() == os.ModeSymlink {
			if err := root.Symlink(e.Link, filepath.FromSlash(e.Path)); err != nil {
				return 0, 0, err
			}
		}
	}
	// Directories' modes last, the deepest first, so that a read-only
	// directory's entries were written before it became so.
	for i := len(l.Files) - 1; i >= 0; i-- {
		if e := l.Files[i]; e.Mode.IsDir() {
			if err := root.Chmod(filepath.FromSlash(e.Path), e.Mode.Perm()); err != nil {
				return 0, 0, err
			}
		}
	}
	return files, bytes, nil
}

// empty removes whatever root holds.
func empty(root *os.Root) error {
	d, err := root.Open(".")
	if err != nil {
		return err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := root.RemoveAll(name); err != nil {
			return err
		}
	}
	return nil
}

// reader reads what user (a [bus.UserToken]) of tenant staged.
type reader struct {
	chunks       Chunks
	tenant, user string
}

// list reads and checks the list ref names.
func (r *reader) list(ctx context.Context, ref string) (*List, error) {
	hash, err := ParseRef(ref)
	if err != nil {
		return nil, refuse("%v", err)
	}
	var buf bytes.Buffer
	if err := r.copy(ctx, &buf, hash, -1, "the file list "+ref); err != nil {
		return nil, err
	}
	var l List
	dec := json.NewDecoder(&buf)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return nil, refuse("the uploaded file list %s is not a file list: %v", ref, err)
	}
	if dec.More() {
		return nil, refuse("the uploaded file list %s is not a file list: it holds more than one JSON value", ref)
	}
	if err := l.Check(); err != nil {
		return nil, refuse("%v", err)
	}
	return &l, nil
}

// write writes the regular file e under root: created where nothing is,
// its content checked, then given its permissions.
func (r *reader) write(ctx context.Context, root *os.Root, e Entry) error {
	f, err := root.OpenFile(filepath.FromSlash(e.Path), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if e.Size > 0 {
		err = r.copy(ctx, f, e.Hash, e.Size, e.Path)
	} else if e.Hash != emptyHash {
		err = incomplete(e.Path)
	}
	if err == nil {
		err = f.Chmod(e.Mode.Perm())
	}
	return errors.Join(err, f.Close())
}

// incomplete is the error of a content that is not staged whole, or does
// not match its hash.
func incomplete(name string) error {
	return refuse("upload of %s is incomplete or does not match its hash; run the command again", name)
}

// copy writes to w the content hash of size bytes (-1: not known, and at
// most maxListBytes), from the chunks the user staged, checking its size
// and hash. name says what it is in errors.
//
// Never from the snapshots' store, though it may hold the content: its
// blobs are every tenant's, and a list naming a hash would read another
// tenant's file by knowing its hash alone. A user lays out only what they
// sent.
func (r *reader) copy(ctx context.Context, w io.Writer, hash string, size int64, name string) error {
	h := sha256.New()
	n, err := r.fromChunks(ctx, io.MultiWriter(w, h), hash, size, name)
	if err != nil {
		return err
	}
	if (size >= 0 && n != size) || hex.EncodeToString(h.Sum(nil)) != hash {
		return incomplete(name)
	}
	return nil
}

// fromChunks copies the chunks staged of the content hash to w, each
// checked to say the content's size, and be of its length.
func (r *reader) fromChunks(ctx context.Context, w io.Writer, hash string, size int64, name string) (int64, error) {
	var n int64
	for i := 0; i < chunkCount(size) || size < 0; i++ {
		subject := bus.UploadSubject(r.tenant, r.user, hash, i)
		rctx, cancel := bus.Bound(ctx)
		m, err := r.chunks.GetLastMsgForSubject(rctx, subject)
		cancel()
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			if size < 0 {
				// The list's first chunk: no such upload.
				return 0, refuse("%s is not uploaded (uploads are kept %d days, for the user who uploaded them alone); run the command again",
					name, int(bus.UploadMaxAge.Hours()/24))
			}
			return 0, incomplete(name)
		}
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", subject, err)
		}
		said, err := strconv.ParseInt(m.Header.Get(sizeHeader), 10, 64)
		switch {
		case err != nil || said <= 0 || (size >= 0 && said != size):
			return 0, incomplete(name)
		case size < 0 && said > maxListBytes:
			return 0, refuse("the uploaded file list is %d bytes, over %d", said, maxListBytes)
		case size < 0:
			size = said
		}
		if len(m.Data) != chunkLen(size, i) {
			return 0, incomplete(name)
		}
		k, err := w.Write(m.Data)
		n += int64(k)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
