package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/envconf"
)

// MaxReplicas is the most replicas JetStream keeps of a stream.
const MaxReplicas = 5

// SetupOption changes what [Setup] does.
type SetupOption func(*setupOptions)

type setupOptions struct {
	replicas int // 0: new ones get one, existing ones keep theirs
	// storeBytes are the bounds asked for of object stores, by bucket.
	storeBytes map[string]int64
	// reads, when set, says which streams the service setting up may
	// read; nil for the administrator.
	reads func(stream string) bool
}

// Reading makes [Setup] check only the streams, KV buckets (their
// streams KV_<bucket>) and object stores (OBJ_<bucket>) that reads says
// the service setting up may read: it is denied even the others' info.
// Without it, Setup sets up everything, as the administrator does.
func Reading(reads func(stream string) bool) SetupOption {
	return func(o *setupOptions) { o.reads = reads }
}

// skip reports whether Setup leaves stream out, as one the service may
// not read.
func (o *setupOptions) skip(stream string) bool {
	return o.reads != nil && !o.reads(stream)
}

// StoreBytes makes [Setup] bound object store bucket to n bytes, and
// change an existing one bounded otherwise. Without it, a new store gets
// Corral's default bound and an existing one keeps its own (one with none,
// made by an older version, gets the default).
func StoreBytes(bucket string, n int64) SetupOption {
	return func(o *setupOptions) {
		if o.storeBytes == nil {
			o.storeBytes = make(map[string]int64)
		}
		o.storeBytes[bucket] = n
	}
}

// storeBytesEnv names the setting of each object store's bound.
var storeBytesEnv = map[string]string{
	BucketWorkspaces: "CORRAL_NATS_WORKSPACES_BYTES",
	BucketSkills:     "CORRAL_NATS_SKILLS_BYTES",
}

// SetupFromEnv returns the options of [Setup] the environment asks for:
// [ReplicasFromEnv], and a [StoreBytes] for each object store whose bound
// is set (CORRAL_NATS_WORKSPACES_BYTES, CORRAL_NATS_SKILLS_BYTES).
func SetupFromEnv(getenv func(string) string) ([]SetupOption, error) {
	opts, err := ReplicasFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	bytes, err := StoreBytesFromEnv(getenv)
	return append(opts, bytes...), err
}

// StoreBytesFromEnv returns a [StoreBytes] for each object store whose
// bound the environment sets.
func StoreBytesFromEnv(getenv func(string) string) ([]SetupOption, error) {
	var opts []SetupOption
	for _, cfg := range objectStores {
		n, err := envconf.Bytes(getenv, storeBytesEnv[cfg.Bucket], 0)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			opts = append(opts, StoreBytes(cfg.Bucket, n))
		}
	}
	return opts, nil
}

// Replicas makes [Setup] create every stream, KV bucket and object store
// with n copies, each on another server of a cluster, and change those that
// have another number to n. Without it, new ones get one copy and existing
// ones keep theirs, so that a service started without it leaves an
// administrator's choice alone. n is between 1 and [MaxReplicas]; a cluster
// needs at least n servers with JetStream.
func Replicas(n int) SetupOption {
	return func(o *setupOptions) { o.replicas = n }
}

// ReplicasFromEnv returns the [Replicas] option of CORRAL_NATS_REPLICAS, or
// none when it is unset.
func ReplicasFromEnv(getenv func(string) string) ([]SetupOption, error) {
	s := getenv("CORRAL_NATS_REPLICAS")
	if s == "" {
		return nil, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxReplicas {
		return nil, fmt.Errorf("CORRAL_NATS_REPLICAS=%q: want a whole number from 1 to %d", s, MaxReplicas)
	}
	return []SetupOption{Replicas(n)}, nil
}

// Setup creates every stream and bucket Corral uses that is missing, and
// updates those whose settings differ. It is idempotent, and every service
// calls it at start-up, so that none depends on another having started
// first. Against streams that are as they should be it only reads: under
// deploy/nats.conf the services may not create or change streams (that
// would let one route messages into another's), and an administrator runs
// `corral setup` once per version instead.
//
// Under a context with a deadline, each pass over them may take up to
// [attemptTimeout]: an answer can be lost (see there), and a pass that
// runs out of time is made again.
func Setup(ctx context.Context, js jetstream.JetStream, opts ...SetupOption) error {
	_, bounded := ctx.Deadline()
	for {
		err := attempt(ctx, js, opts...)
		switch {
		case err == nil:
			return nil
		case peerOffline(err):
			// A cluster just started, or a server of it restarting.
		case bounded && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
			// An answer lost: ask again.
		default:
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// attemptTimeout bounds a pass of [Setup] under a context with a deadline.
// The answer to a request can be lost, as when the route between two
// servers of a cluster forming is closed as a duplicate just as a new
// stream's leader answers, and the client would wait for it until the
// context ends. Asking again is safe: creating a stream or bucket that
// exists as it should be, or updating one to what it is, changes nothing.
var attemptTimeout = 20 * time.Second

// attempt runs setup once, for at most attemptTimeout when ctx has a
// deadline; without one, each request has the client's own time-out.
func attempt(ctx context.Context, js jetstream.JetStream, opts ...SetupOption) error {
	if _, ok := ctx.Deadline(); !ok {
		return setup(ctx, js, opts...)
	}
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	return setup(ctx, js, opts...)
}

// errNoSuitablePeers is the server's error code for a replicated stream it
// cannot place (JSClusterNoPeersErrF).
const errNoSuitablePeers jetstream.ErrorCode = 10005

// peerOffline reports whether err is the server's refusal to place a
// replicated stream because a server it would go on is offline, as while
// a cluster forms: worth trying again, unlike too few servers.
func peerOffline(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errNoSuitablePeers && strings.Contains(apiErr.Description, "peer offline")
}

func setup(ctx context.Context, js jetstream.JetStream, opts ...SetupOption) error {
	var o setupOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.replicas < 0 || o.replicas > MaxReplicas {
		return fmt.Errorf("set up streams: %d replicas: want 1 to %d", o.replicas, MaxReplicas)
	}
	// A different number of replicas alone is a difference only when one
	// was asked for.
	replicasDiffer := func(have int) bool { return o.replicas != 0 && max(have, 1) != o.replicas }
	for _, cfg := range streams {
		if o.skip(cfg.Name) {
			continue
		}
		cfg.Replicas = o.replicas
		s, err := js.Stream(ctx, cfg.Name)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			_, err = js.CreateStream(ctx, cfg)
		case err == nil && (!sameStream(s.CachedInfo().Config, cfg) || replicasDiffer(s.CachedInfo().Config.Replicas)):
			if o.replicas == 0 {
				cfg.Replicas = s.CachedInfo().Config.Replicas
			}
			_, err = js.UpdateStream(ctx, cfg)
		}
		if err != nil {
			return setupError("stream "+cfg.Name, err)
		}
	}
	for _, cfg := range buckets {
		if o.skip("KV_" + cfg.Bucket) {
			continue
		}
		cfg.Replicas = o.replicas
		kv, err := js.KeyValue(ctx, cfg.Bucket)
		switch {
		case errors.Is(err, jetstream.ErrBucketNotFound):
			_, err = js.CreateKeyValue(ctx, cfg)
		case err == nil:
			var st jetstream.KeyValueStatus
			if st, err = kv.Status(ctx); err != nil {
				break
			}
			have := 0
			if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
				have = bs.StreamInfo().Config.Replicas
			}
			if st.TTL() != cfg.TTL || st.History() != int64(cfg.History) || replicasDiffer(have) {
				if o.replicas == 0 {
					cfg.Replicas = have
				}
				_, err = js.UpdateKeyValue(ctx, cfg)
			}
		}
		if err != nil {
			return setupError("kv "+cfg.Bucket, err)
		}
	}
	for _, cfg := range objectStores {
		if o.skip("OBJ_" + cfg.Bucket) {
			continue
		}
		cfg.Replicas = o.replicas
		asked, bounded := o.storeBytes[cfg.Bucket]
		if bounded {
			cfg.MaxBytes = asked
		}
		obs, err := js.ObjectStore(ctx, cfg.Bucket)
		switch {
		case errors.Is(err, jetstream.ErrBucketNotFound):
			_, err = js.CreateObjectStore(ctx, cfg)
		case err == nil:
			var st jetstream.ObjectStoreStatus
			if st, err = obs.Status(ctx); err != nil {
				break
			}
			have := int64(-1)
			if bs, ok := st.(*jetstream.ObjectBucketStatus); ok {
				have = bs.StreamInfo().Config.MaxBytes
			}
			// A bound asked for, or the default where there is none.
			rebound := bounded && have != asked || !bounded && have <= 0
			if !rebound && !replicasDiffer(st.Replicas()) {
				break
			}
			if o.replicas == 0 {
				cfg.Replicas = st.Replicas()
			}
			if !bounded && !rebound {
				cfg.MaxBytes = have
			}
			_, err = js.UpdateObjectStore(ctx, cfg)
		}
		if err != nil {
			return setupError("object store "+cfg.Bucket, err)
		}
	}
	return nil
}

func setupError(what string, err error) error {
	return fmt.Errorf("set up %s: %w (a service whose NATS user may not create or change streams needs them set up first: corral setup, as an administrator)", what, err)
}

// sameStream reports whether a stream's settings are the ones Corral sets;
// a setting Corral leaves unset may hold the server's default. Replicas are
// compared by the caller.
func sameStream(have, want jetstream.StreamConfig) bool {
	unlimited := func(n int32) int32 { return max(n, 0) }
	return slices.Equal(have.Subjects, want.Subjects) && have.Retention == want.Retention &&
		have.Storage == want.Storage && (want.Duplicates == 0 || have.Duplicates == want.Duplicates) &&
		unlimited(have.MaxMsgSize) == unlimited(want.MaxMsgSize) && have.AllowDirect == want.AllowDirect &&
		have.MaxAge == want.MaxAge && have.Description == want.Description &&
		(want.MaxConsumers == 0 || have.MaxConsumers == want.MaxConsumers) &&
		(want.MaxBytes == 0 || have.MaxBytes == want.MaxBytes && have.Discard == want.Discard)
}
