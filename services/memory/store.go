package memory

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Errors a [Store] returns, for branching with errors.Is.
var (
	// ErrNotFound: no such file.
	ErrNotFound = errors.New("no such file")
	// ErrConflict: the file is not at the version the write expected.
	ErrConflict = errors.New("file changed")
	// ErrTooMany: the tenant holds as many files as it may.
	ErrTooMany = errors.New("too many files")
	// ErrBadPattern: a Grep pattern that is not a valid regular expression.
	ErrBadPattern = errors.New("invalid pattern")
	// ErrFull: the write would take the tenant's stored bytes, its
	// files' kept versions included, past its bound, even with every
	// version but each file's latest pruned.
	ErrFull = errors.New("memory storage full")
)

// Versions is how many versions of a file a store keeps, its latest
// included: a write prunes the older ones.
const Versions = 64

// Key names one file: the path as the model sees it, in a tenant, and the
// user who owns it for a private memory ("" for a file the tenant shares).
type Key struct {
	Tenant string
	Owner  string
	Path   string
}

func (k Key) String() string {
	if k.Owner == "" {
		return k.Tenant + ":" + k.Path
	}
	return fmt.Sprintf("%s:%s:%s", k.Tenant, k.Owner, k.Path)
}

// File is one version of a file. Content is empty in listings.
type File struct {
	Key
	Content   string
	Size      int
	Version   int64
	UpdatedBy string
	UpdatedAt time.Time
}

// Change is one version in a file's history; Deleted marks a removal.
type Change struct {
	Version   int64
	Deleted   bool
	Size      int
	ChangedBy string
	ChangedAt time.Time
	Op        uuid.UUID
}

// Write is a change to make to a file.
type Write struct {
	Key
	// Content is the new content; ignored by Delete.
	Content string
	// Expect is the version the file must be at: 0 for a file that must
	// not exist yet (or was deleted).
	Expect int64
	// By names who writes: the user of the tool call's session, or the
	// user an API request's subject names.
	By string
	// Op identifies the operation (the tool call's ID). A write whose Op
	// was applied already returns the version it made and changes nothing,
	// so a redelivered call is applied once.
	Op uuid.UUID
	// MaxFiles bounds the tenant's live files when this write creates one;
	// 0 means no bound.
	MaxFiles int
	// MaxBytes bounds the bytes the tenant stores: the content of every
	// version kept of every file, shared and private. A write that would
	// pass it first prunes the tenant's oldest versions (never a file's
	// latest); if that is not enough it fails with ErrFull and changes
	// nothing. 0 means no bound.
	MaxBytes int64
}

// Match is a line that matched a Grep pattern.
type Match struct {
	Path string
	Line int
	Text string
}

// Store keeps memory and skill files, versioned. Every method is scoped to
// one tenant; listings and searches see the tenant's shared files and the
// private files of the one user given.
type Store interface {
	// Get returns the file's current version, or ErrNotFound.
	Get(ctx context.Context, k Key) (File, error)
	// Put writes the file if it is at w.Expect and returns the new version;
	// otherwise it returns an error wrapping ErrConflict (or ErrTooMany).
	Put(ctx context.Context, w Write) (File, error)
	// Delete removes the file if it is at w.Expect, keeping its history.
	Delete(ctx context.Context, w Write) error
	// List returns the live files whose path starts with prefix, by path,
	// without content.
	List(ctx context.Context, tenant, user, prefix string) ([]File, error)
	// Grep returns up to limit lines of those files matching the regular
	// expression pattern, by path and line.
	Grep(ctx context.Context, tenant, user, prefix, pattern string, limit int) ([]Match, error)
	// History returns the file's kept changes, oldest first (at most
	// [Versions]), or ErrNotFound.
	History(ctx context.Context, k Key) ([]Change, error)
	// Version returns version v of the file, with its content, or
	// ErrNotFound when the file never had it or it was pruned. A removal
	// has no content: it is returned with ErrNotFound too.
	Version(ctx context.Context, k Key, v int64) (File, error)
}

// fullError is the ErrFull of a write that would take tenant to stored
// bytes, past its bound of max.
func fullError(tenant string, stored, max int64) error {
	return fmt.Errorf("%w: tenant %s would store %d bytes, its files' kept versions included, and may store at most %d", ErrFull, tenant, stored, max)
}

// ConflictError is the ErrConflict of a write that expected one version of
// an existing file and found another.
type ConflictError struct {
	Expected, Current int64
}

func (e *ConflictError) Error() string {
	if e.Expected == 0 {
		return fmt.Sprintf("%v: it exists (version %d)", ErrConflict, e.Current)
	}
	return fmt.Sprintf("%v: expected version %d, found %d", ErrConflict, e.Expected, e.Current)
}

func (e *ConflictError) Unwrap() error { return ErrConflict }
