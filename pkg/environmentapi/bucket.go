package environmentapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/environment"
)

var (
	// ErrUnknown is wrapped by the errors of [Resolve] and [Lookup] for an
	// environment the tenant does not have.
	ErrUnknown = errors.New("no such environment")
	// ErrVersionGone is wrapped by [Lookup]'s error for a version the
	// environment no longer keeps: changed too often since, or removed
	// and made again.
	ErrVersionGone = errors.New("the environment no longer has that version")
)

// Resolve returns the environment a session of tenant runs in when its
// request names name: that environment, or with name "" the tenant's
// default, and the version of its definition now, and whether that
// version's layer was built. A tenant without a default resolves "" to
// none: "", "", false and no error. An environment the tenant does not
// have (a default that names one removed since, too) is an error wrapping
// [ErrUnknown], whose message says so to the requester. kv is
// [bus.BucketEnvironments]; ctx bounds the reads.
func Resolve(ctx context.Context, kv jetstream.KeyValue, tenant, name string) (resolved, version string, built bool, err error) {
	if name == "" {
		d, _, err := Default(ctx, kv, tenant)
		if err != nil || d == "" {
			return "", "", false, err
		}
		name = d
	}
	e, _, err := Get(ctx, kv, tenant, name)
	if err != nil {
		return "", "", false, err
	}
	return name, e.Version, e.IsBuilt(), nil
}

// Lookup returns tenant's environment name as it was at version: its
// entry now, if that is its version, or the last write of that version
// the bucket keeps. An environment the tenant does not have is an error
// wrapping [ErrUnknown]; a version it no longer keeps, [ErrVersionGone].
func Lookup(ctx context.Context, kv jetstream.KeyValue, tenant, name, version string) (Entry, error) {
	e, _, err := Get(ctx, kv, tenant, name)
	if err != nil || e.Version == version {
		return e, err
	}
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	history, err := kv.History(rctx, Key(tenant, name))
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return Entry{}, fmt.Errorf("environment %s: %w", name, err)
	}
	for _, h := range slices.Backward(history) {
		if h.Operation() != jetstream.KeyValuePut {
			break // removed, and made again after
		}
		old, err := decode(name, h.Value())
		if err != nil {
			return Entry{}, err
		}
		if old.Version == version {
			return old, nil
		}
	}
	return Entry{}, fmt.Errorf("%w: environment %q of tenant %s has no version %.12s any more (it changed since, or was removed and made again): a new session runs in its version now", ErrVersionGone, name, tenant, version)
}

// List returns tenant's environments, by name, and the name of its
// default ("" for none).
func List(ctx context.Context, kv jetstream.KeyValue, tenant string) ([]Environment, string, error) {
	def, _, err := Default(ctx, kv, tenant)
	if err != nil {
		return nil, "", err
	}
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	w, err := kv.Watch(rctx, Key(tenant, "*"), jetstream.IgnoreDeletes())
	if err != nil {
		return nil, "", fmt.Errorf("list the environments of %s: %w", tenant, err)
	}
	defer w.Stop()
	var out []Environment
	for {
		var e jetstream.KeyValueEntry
		select {
		case e = <-w.Updates():
		case <-rctx.Done():
			return nil, "", fmt.Errorf("list the environments of %s: %w", tenant, rctx.Err())
		}
		if e == nil {
			break // all there is, read
		}
		name := strings.TrimPrefix(e.Key(), tenant+".")
		if name == strings.TrimPrefix(DefaultKey(tenant), tenant+".") {
			continue
		}
		en, err := decode(name, e.Value())
		if err != nil {
			return nil, "", err
		}
		out = append(out, Environment{Entry: en, Default: name == def})
	}
	slices.SortFunc(out, func(a, b Environment) int { return strings.Compare(a.Spec.Name, b.Spec.Name) })
	return out, def, nil
}

// Get returns tenant's environment name as the bucket holds it now, with
// the revision of its key, for a write that must not overwrite another.
// An unknown environment, or a name no environment may have, is an error
// wrapping [ErrUnknown].
func Get(ctx context.Context, kv jetstream.KeyValue, tenant, name string) (Entry, uint64, error) {
	if err := environment.CheckName(name); err != nil {
		return Entry{}, 0, fmt.Errorf("%w %q in tenant %s: %v", ErrUnknown, name, tenant, err)
	}
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	kve, err := kv.Get(rctx, Key(tenant, name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Entry{}, 0, fmt.Errorf("%w %q in tenant %s (corral environments ls lists them)", ErrUnknown, name, tenant)
	}
	if err != nil {
		return Entry{}, 0, fmt.Errorf("environment %s: %w", name, err)
	}
	e, err := decode(name, kve.Value())
	return e, kve.Revision(), err
}

// Default returns the name of tenant's default environment ("" for none),
// with the revision of its key (0 for none).
func Default(ctx context.Context, kv jetstream.KeyValue, tenant string) (string, uint64, error) {
	rctx, cancel := bus.Bound(ctx)
	defer cancel()
	e, err := kv.Get(rctx, DefaultKey(tenant))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, fmt.Errorf("the default environment of %s: %w", tenant, err)
	}
	var d DefaultEntry
	if err := json.Unmarshal(e.Value(), &d); err != nil {
		return "", 0, fmt.Errorf("the default environment of %s: %w", tenant, err)
	}
	return d.Name, e.Revision(), nil
}

// decode reads an entry of environment name.
func decode(name string, data []byte) (Entry, error) {
	var e Entry
	if err := json.Unmarshal(data, &e); err != nil {
		return Entry{}, fmt.Errorf("environment %s: %w", name, err)
	}
	return e, nil
}
