package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
)

// skillIndex knows each tenant's skills as the memory service last
// published them. It follows the skills store's objects with a watch, so
// that a turn learns whether a tenant's skills changed without asking the
// store, and fetches a tenant's list again only when its digest changes.
type skillIndex struct {
	store jetstream.ObjectStore
	log   *slog.Logger
	// ready is closed once the watch has read every object stored when it
	// began; until then a turn waits, rather than miss a tenant's skills.
	ready chan struct{}

	mu sync.Mutex
	// digests holds the digest of each tenant's index object, by object
	// name.
	digests map[string]string
	// cache holds the lists fetched, by tenant; the least recently used
	// is forgotten, and fetched again when next needed.
	cache *lru.Cache[string, cachedSkills]
}

type cachedSkills struct {
	digest string
	skills []event.Skill
}

func newSkillIndex(store jetstream.ObjectStore, log *slog.Logger) (*skillIndex, error) {
	cache, err := lru.New[string, cachedSkills](10000)
	if err != nil {
		return nil, err
	}
	return &skillIndex{store: store, log: log, ready: make(chan struct{}), digests: make(map[string]string), cache: cache}, nil
}

// run follows the store until ctx is done. A watch that ends otherwise
// (the connection closed under it) is started again.
func (x *skillIndex) run(ctx context.Context) error {
	for {
		err := x.follow(ctx)
		if ctx.Err() != nil {
			return nil
		}
		x.log.WarnContext(ctx, "skills watch ended, starting it again", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

func (x *skillIndex) follow(ctx context.Context) error {
	w, err := x.store.Watch(ctx)
	if err != nil {
		return fmt.Errorf("watch %s: %w", bus.BucketSkills, err)
	}
	defer w.Stop()
	for {
		var info *jetstream.ObjectInfo
		var ok bool
		select {
		case <-ctx.Done():
			return nil
		case info, ok = <-w.Updates():
		}
		switch {
		case !ok:
			return errors.New("watch closed")
		case info == nil: // every object stored when the watch began is read
			select {
			case <-x.ready:
			default:
				close(x.ready)
			}
		case strings.HasSuffix(info.Name, bus.SkillsIndex("")):
			x.mu.Lock()
			if info.Deleted {
				delete(x.digests, info.Name)
			} else {
				x.digests[info.Name] = info.Digest
			}
			x.mu.Unlock()
		}
	}
}

// load returns the tenant's skills; none if the memory service never
// published any.
func (x *skillIndex) load(ctx context.Context, tenant string) ([]event.Skill, error) {
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	select {
	case <-x.ready:
	case <-rctx.Done():
		// The watch cannot start (the store is unreachable, say): the
		// step fails and is tried again, rather than wait with its lease.
		return nil, fmt.Errorf("load skills of %s: the skills store's watch has not started: %w", tenant, rctx.Err())
	}
	name := bus.SkillsIndex(tenant)
	x.mu.Lock()
	digest, ok := x.digests[name]
	c, cached := x.cache.Get(tenant)
	x.mu.Unlock()
	if !ok {
		return nil, nil
	}
	if cached && c.digest == digest {
		return c.skills, nil
	}
	data, err := x.store.GetBytes(rctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load skills of %s: %w", tenant, err)
	}
	var set event.SkillSet
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("load skills of %s: %w", tenant, err)
	}
	x.mu.Lock()
	// Cached under the digest the watch knew: should the object have
	// changed since, its next update fetches it again.
	x.cache.Add(tenant, cachedSkills{digest: digest, skills: set.Skills})
	x.mu.Unlock()
	return set.Skills, nil
}
