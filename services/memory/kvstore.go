package memory

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
)

// BucketMemories is the KV bucket of the embedded store.
const BucketMemories = "memories"

// KVStore is a [Store] in a JetStream KV bucket, for running without a
// database (corral dev). A file is a key, <tenant>.<owner>.<path> with the
// owner and path base64url-encoded (the owner "_" for shared files). Its
// version is its own, counted in its value (the first write's is 1), and a
// write is the bucket's compare-and-set on the revision it read. A removal is a tombstone value, keeping who
// removed it in the history. Grep reads the files it searches into the
// service: fine for one developer, which is what this store is for.
//
// The bucket keeps [Versions] versions of a key. A tenant's stored bytes
// are summed from its keys' history on each write that has a bound, and
// older versions are pruned by deleting them from the bucket's stream.
type KVStore struct {
	kv jetstream.KeyValue
	// stream is the bucket's, whose messages are the versions.
	stream jetstream.Stream
	// prunable is whether single versions may be deleted from stream.
	prunable bool
}

// NewKVStore opens the bucket, creating it if it is missing, and returns
// the store.
//
// The bucket is made as a KV bucket is, but with its stream allowing
// single versions to be deleted: that is how versions are pruned. A
// bucket made by an earlier release denies it, and no update can lift
// that: there a tenant at its bound is refused until it removes files.
func NewKVStore(ctx context.Context, js jetstream.JetStream) (*KVStore, error) {
	stream, err := js.Stream(ctx, kvStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		stream, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name:              kvStream,
			Description:       "memories and skills of corral dev's embedded store",
			Subjects:          []string{"$KV." + BucketMemories + ".>"},
			MaxMsgsPerSubject: Versions,
			MaxBytes:          -1,
			MaxMsgSize:        -1,
			MaxMsgs:           -1,
			MaxConsumers:      -1,
			Storage:           jetstream.FileStorage,
			Replicas:          1,
			AllowRollup:       true,
			AllowDirect:       true,
			Duplicates:        2 * time.Minute,
			Discard:           jetstream.DiscardNew,
		})
	}
	if err != nil {
		return nil, fmt.Errorf("open kv %s: %w", BucketMemories, err)
	}
	kv, err := js.KeyValue(ctx, BucketMemories)
	if err != nil {
		return nil, fmt.Errorf("open kv %s: %w", BucketMemories, err)
	}
	return &KVStore{kv: kv, stream: stream, prunable: !stream.CachedInfo().Config.DenyDelete}, nil
}

// kvStream is the stream of the bucket.
const kvStream = "KV_" + BucketMemories

// kvFile is a file's value in the bucket.
type kvFile struct {
	Path    string    `json:"path"`
	Owner   string    `json:"owner,omitempty"`
	Content string    `json:"content,omitempty"`
	Deleted bool      `json:"deleted,omitempty"`
	By      string    `json:"by"`
	At      time.Time `json:"at"`
	Op      uuid.UUID `json:"op"`
	// Version is the file's own: its first write's is 1, and each write
	// or removal adds one, as the PostgreSQL store counts. A value
	// written before files counted their own has none, and its version
	// is its revision in the bucket.
	Version int64 `json:"version,omitempty"`
}

// version is f's version, f being the value of revision rev.
func (f *kvFile) version(rev uint64) int64 {
	if f.Version > 0 {
		return f.Version
	}
	return int64(rev)
}

var b64 = base64.RawURLEncoding

func ownerToken(owner string) string {
	if owner == "" {
		return "_"
	}
	return b64.EncodeToString([]byte(owner))
}

func kvKey(k Key) string {
	return k.Tenant + "." + ownerToken(k.Owner) + "." + b64.EncodeToString([]byte(k.Path))
}

func (s *KVStore) load(ctx context.Context, k Key) (*kvFile, uint64, error) {
	e, err := s.kv.Get(ctx, kvKey(k))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var f kvFile
	if err := json.Unmarshal(e.Value(), &f); err != nil {
		return nil, 0, fmt.Errorf("decode %s: %w", k, err)
	}
	return &f, e.Revision(), nil
}

func (f *kvFile) file(k Key, rev uint64) File {
	return File{Key: k, Content: f.Content, Size: len(f.Content), Version: f.version(rev), UpdatedBy: f.By, UpdatedAt: f.At}
}

// Get implements [Store].
func (s *KVStore) Get(ctx context.Context, k Key) (File, error) {
	f, rev, err := s.load(ctx, k)
	if err != nil {
		return File{}, fmt.Errorf("get %s: %w", k, err)
	}
	if f == nil || f.Deleted {
		return File{}, fmt.Errorf("get %s: %w", k, ErrNotFound)
	}
	return f.file(k, rev), nil
}

// Put implements [Store].
func (s *KVStore) Put(ctx context.Context, w Write) (File, error) {
	f, err := s.write(ctx, w, false)
	if err != nil {
		return File{}, fmt.Errorf("put %s: %w", w.Key, err)
	}
	return f, nil
}

// Delete implements [Store].
func (s *KVStore) Delete(ctx context.Context, w Write) error {
	if _, err := s.write(ctx, w, true); err != nil {
		return fmt.Errorf("delete %s: %w", w.Key, err)
	}
	return nil
}

func (s *KVStore) write(ctx context.Context, w Write, del bool) (File, error) {
	cur, rev, err := s.load(ctx, w.Key)
	if err != nil {
		return File{}, err
	}
	if cur != nil && cur.Op == w.Op {
		return cur.file(w.Key, rev), nil // applied already
	}
	live := cur != nil && !cur.Deleted
	var version int64 // the file's, 0 for none yet
	if cur != nil {
		version = cur.version(rev)
	}
	switch {
	case del && !live:
		return File{}, ErrNotFound
	case w.Expect == 0 && live:
		return File{}, &ConflictError{Expected: 0, Current: version}
	case w.Expect != 0 && !live:
		return File{}, fmt.Errorf("%w: expected version %d, but the file does not exist", ErrConflict, w.Expect)
	case w.Expect != 0 && w.Expect != version:
		return File{}, &ConflictError{Expected: w.Expect, Current: version}
	}
	if !live && w.MaxFiles > 0 {
		n, err := s.count(ctx, w.Tenant)
		if err != nil {
			return File{}, err
		}
		if n >= w.MaxFiles {
			return File{}, fmt.Errorf("%w: tenant %s has %d files, the most it may have", ErrTooMany, w.Tenant, n)
		}
	}
	next := kvFile{Path: w.Path, Owner: w.Owner, Content: w.Content, Deleted: del, By: w.By, At: time.Now().UTC(), Op: w.Op, Version: version + 1}
	if del {
		next.Content = ""
	}
	data, err := json.Marshal(&next)
	if err != nil {
		return File{}, err
	}
	var supersede bool // prune the version this write replaces once it is written
	if w.MaxBytes > 0 {
		if supersede, err = s.makeRoom(ctx, w, len(next.Content), rev); err != nil {
			return File{}, err
		}
	}
	prev := rev
	rev, err = bus.Swap(ctx, s.kv, kvKey(w.Key), data, rev)
	if bus.Conflict(err) {
		// Someone else wrote between our read and our write.
		if again, arev, lerr := s.load(ctx, w.Key); lerr == nil && again != nil && again.Op == w.Op {
			return again.file(w.Key, arev), nil
		}
		return File{}, fmt.Errorf("%w: written meanwhile", ErrConflict)
	}
	if err != nil {
		return File{}, err
	}
	if supersede {
		if err := s.stream.DeleteMsg(ctx, prev); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return File{}, fmt.Errorf("prune %s version %d: %w", w.Key, prev, err)
		}
	}
	return next.file(w.Key, rev), nil
}

// files returns the live files of a tenant whose path starts with prefix,
// by path: those visible to user, or every user's when all is set.
func (s *KVStore) files(ctx context.Context, tenant, user, prefix string, all bool) ([]File, error) {
	filters := []string{tenant + "._.*"}
	switch {
	case all:
		filters = []string{tenant + ".*.*"}
	case user != "":
		filters = append(filters, tenant+"."+ownerToken(user)+".*")
	}
	watch, err := s.kv.WatchFiltered(ctx, filters, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer watch.Stop()
	var out []File
	for e := range watch.Updates() {
		if e == nil {
			break // all current values seen
		}
		var f kvFile
		if err := json.Unmarshal(e.Value(), &f); err != nil {
			return nil, fmt.Errorf("decode %s: %w", e.Key(), err)
		}
		if f.Deleted || !strings.HasPrefix(f.Path, prefix) {
			continue
		}
		out = append(out, f.file(Key{Tenant: tenant, Owner: f.Owner, Path: f.Path}, e.Revision()))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Path != out[j].Path {
			return out[i].Path < out[j].Path
		}
		return out[i].Owner < out[j].Owner
	})
	return out, nil
}

func (s *KVStore) count(ctx context.Context, tenant string) (int, error) {
	fs, err := s.files(ctx, tenant, "", "", true)
	return len(fs), err
}

// List implements [Store].
func (s *KVStore) List(ctx context.Context, tenant, user, prefix string) ([]File, error) {
	fs, err := s.files(ctx, tenant, user, prefix, false)
	if err != nil {
		return nil, fmt.Errorf("list %s:%s: %w", tenant, prefix, err)
	}
	for i := range fs {
		fs[i].Content = ""
	}
	return fs, nil
}

// Grep implements [Store].
func (s *KVStore) Grep(ctx context.Context, tenant, user, prefix, pattern string, limit int) ([]Match, error) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadPattern, err)
	}
	fs, err := s.files(ctx, tenant, user, prefix, false)
	if err != nil {
		return nil, fmt.Errorf("grep %s:%s: %w", tenant, prefix, err)
	}
	var out []Match
	for _, f := range fs {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("grep %s:%s: %w", tenant, prefix, err)
		}
		for i, line := range strings.Split(f.Content, "\n") {
			if re.MatchString(line) {
				out = append(out, Match{Path: f.Path, Line: i + 1, Text: line})
				if len(out) == limit {
					return out, nil
				}
			}
		}
	}
	return out, nil
}

// History implements [Store].
func (s *KVStore) History(ctx context.Context, k Key) ([]Change, error) {
	es, err := s.kv.History(ctx, kvKey(k))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("history %s: %w", k, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("history %s: %w", k, err)
	}
	out := make([]Change, 0, len(es))
	for _, e := range es {
		var f kvFile
		if err := json.Unmarshal(e.Value(), &f); err != nil {
			return nil, fmt.Errorf("decode %s: %w", k, err)
		}
		out = append(out, Change{Version: f.version(e.Revision()), Deleted: f.Deleted, Size: len(f.Content),
			ChangedBy: f.By, ChangedAt: f.At, Op: f.Op})
	}
	return out, nil
}

// Version implements [Store].
func (s *KVStore) Version(ctx context.Context, k Key, v int64) (File, error) {
	if v <= 0 {
		return File{}, fmt.Errorf("%s version %d: %w", k, v, ErrNotFound)
	}
	// A file's versions are its own, not the bucket's revisions: found
	// among the few it keeps.
	es, err := s.kv.History(ctx, kvKey(k))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return File{}, fmt.Errorf("%s version %d: %w", k, v, ErrNotFound)
	}
	if err != nil {
		return File{}, fmt.Errorf("%s version %d: %w", k, v, err)
	}
	for _, e := range es {
		var f kvFile
		if err := json.Unmarshal(e.Value(), &f); err != nil {
			return File{}, fmt.Errorf("decode %s: %w", k, err)
		}
		if f.version(e.Revision()) == v && !f.Deleted {
			return f.file(k, e.Revision()), nil
		}
	}
	return File{}, fmt.Errorf("%s version %d: %w", k, v, ErrNotFound)
}

// kvVersion is one kept version of a file.
type kvVersion struct {
	key  string
	rev  uint64
	size int64
}

// makeRoom prunes the tenant's oldest versions, never a file's latest,
// until w, of size bytes and replacing version cur of its file, fits in
// w.MaxBytes, or fails with ErrFull, pruning nothing. Whether the version
// w replaces must go too is returned: it goes only once w is written.
func (s *KVStore) makeRoom(ctx context.Context, w Write, size int, cur uint64) (supersede bool, err error) {
	watch, err := s.kv.WatchFiltered(ctx, []string{w.Tenant + ".*.*"}, jetstream.IncludeHistory())
	if err != nil {
		return false, err
	}
	defer watch.Stop()
	var all []kvVersion
	latest := map[string]uint64{}
	stored := int64(size)
	for e := range watch.Updates() {
		if e == nil {
			break // all kept versions seen
		}
		var f kvFile
		if err := json.Unmarshal(e.Value(), &f); err != nil {
			return false, fmt.Errorf("decode %s: %w", e.Key(), err)
		}
		v := kvVersion{key: e.Key(), rev: e.Revision(), size: int64(len(f.Content))}
		all = append(all, v)
		latest[v.key] = max(latest[v.key], v.rev)
		stored += v.size
	}
	key := kvKey(w.Key)
	var own, old []kvVersion
	for _, v := range all {
		if v.key == key {
			own = append(own, v)
		}
	}
	sort.Slice(own, func(i, j int) bool { return own[i].rev < own[j].rev })
	dropped := uint64(0)
	if len(own) >= Versions {
		// The bucket drops the file's oldest version as w is written.
		dropped = own[0].rev
		stored -= own[0].size
	}
	for _, v := range all {
		if s.prunable && v.rev != dropped && (v.rev < latest[v.key] || v.key == key && v.rev == cur) {
			old = append(old, v)
		}
	}
	sort.Slice(old, func(i, j int) bool { return old[i].rev < old[j].rev })
	var doomed []uint64
	for _, v := range old {
		if stored <= w.MaxBytes {
			break
		}
		doomed = append(doomed, v.rev)
		stored -= v.size
	}
	if stored > w.MaxBytes {
		return false, fullError(w.Tenant, stored, w.MaxBytes)
	}
	for _, rev := range doomed {
		if rev == cur && cur != 0 {
			supersede = true
			continue
		}
		if err := s.stream.DeleteMsg(ctx, rev); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return false, fmt.Errorf("prune %s version %d: %w", w.Tenant, rev, err)
		}
	}
	return supersede, nil
}
