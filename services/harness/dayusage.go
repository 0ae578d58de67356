package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/event"
	"corral.dev/pkg/model"
	"corral.dev/pkg/policy"
)

// dayUsages reads what users and tenants spent each day, from the usage
// bucket the usage counter writes, for the daily budgets, and prices a
// response as the counter counts it.
type dayUsages struct {
	kv  jetstream.KeyValue
	pol *policy.Policy
	// cache holds the usage last read of each key; mu orders its updates.
	// It is bounded, the least recently used key forgotten: it is read
	// again when next needed.
	mu    sync.Mutex
	cache *lru.Cache[string, cachedUsage]
}

func newDayUsages(kv jetstream.KeyValue, pol *policy.Policy) (*dayUsages, error) {
	cache, err := lru.New[string, cachedUsage](10000)
	if err != nil {
		return nil, err
	}
	return &dayUsages{kv: kv, pol: pol, cache: cache}, nil
}

// dayUsageFresh is how old a day's usage read for a budget check may be,
// so that a busy harness reads each key once per period, not once per
// step. What this harness's sessions spent since the read is added to it,
// so they cannot overrun a daily budget in between; other harnesses'
// sessions can, by what they spend in that long.
const dayUsageFresh = time.Second

type cachedUsage struct {
	u    policy.Usage
	read time.Time
	// since is what sessions of this harness spent after the read.
	since policy.Usage
}

// recent returns a day's usage read at most [dayUsageFresh] ago, with
// what this harness's sessions spent since.
func (d *dayUsages) recent(ctx context.Context, key string) (policy.Usage, error) {
	c, ok := d.cache.Get(key)
	if ok && time.Since(c.read) < dayUsageFresh {
		c.u.Add(c.since)
		return c.u, nil
	}
	u, _, err := d.read(ctx, key)
	if err != nil {
		return policy.Usage{}, err
	}
	d.mu.Lock()
	d.cache.Add(key, cachedUsage{u: u.Usage, read: time.Now()})
	d.mu.Unlock()
	return u.Usage, nil
}

// price is what a model response counts in daily usage.
func (d *dayUsages) price(modelName string, u model.Usage) policy.Usage {
	return policy.Usage{Steps: 1, InputTokens: int64(u.InputTokens), OutputTokens: int64(u.OutputTokens),
		CacheReadTokens: int64(u.CacheReadTokens), CacheWriteTokens: int64(u.CacheWriteTokens),
		CostUSD: d.pol.Cost(modelName, u)}
}

// spent notes a model response of a session of tenant and user in the
// usage read for their daily budgets.
func (d *dayUsages) spent(tenant, user string, ev *event.ModelResponded) {
	u := d.price(ev.Model, ev.Usage)
	day := ev.Time.UTC().Format(time.DateOnly)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, key := range []string{bus.UsageKey(tenant, day, ""), bus.UsageKey(tenant, day, user)} {
		if c, ok := d.cache.Get(key); ok {
			c.since.Add(u)
			d.cache.Add(key, c)
		}
	}
}

// dayUsage is what a key of the usage bucket holds: usage, and the stream
// sequence of the last event counted in it.
type dayUsage struct {
	policy.Usage
	LastSeq uint64 `json:"last_seq"`
}

// read reads a key of the usage bucket, and returns its revision.
func (d *dayUsages) read(ctx context.Context, key string) (dayUsage, uint64, error) {
	var u dayUsage
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	e, err := d.kv.Get(rctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return u, 0, nil
	}
	if err != nil {
		return u, 0, fmt.Errorf("read usage %s: %w", key, err)
	}
	if err := json.Unmarshal(e.Value(), &u); err != nil {
		return u, 0, fmt.Errorf("read usage %s: %w", key, err)
	}
	return u, e.Revision(), nil
}
