package bus_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/natstest"
)

// every names every stream, KV bucket (KV_<name>) and object store
// (OBJ_<name>) Corral uses.
var every = []string{bus.StreamRequests, bus.StreamEvents, bus.StreamTools, bus.StreamDeadLetter, bus.StreamPayloads, bus.StreamUploads,
	"KV_" + bus.BucketLeases, "KV_" + bus.BucketCalls, "KV_" + bus.BucketApprovals, "KV_" + bus.BucketUsage,
	"KV_" + bus.BucketNodes, "KV_" + bus.BucketPlacements, "KV_" + bus.BucketCredentials,
	"KV_" + bus.BucketVaults, "KV_" + bus.BucketEgress, "KV_" + bus.BucketEnvironments,
	"OBJ_" + bus.BucketSkills, "OBJ_" + bus.BucketWorkspaces}

// replicas returns the replicas of each of [every] on the server, and of
// any other stream it has.
func replicas(t *testing.T, js jetstream.JetStream) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[string]int{}
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		out[info.Config.Name] = info.Config.Replicas
	}
	// A listing in a cluster can leave out a stream whose leader is busy.
	for _, name := range every {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		out[name] = s.CachedInfo().Config.Replicas
	}
	return out
}

func TestSetupReplicas(t *testing.T) {
	c := natstest.RunCluster(t, 3)
	_, js := natstest.Connect(t, c.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Without the option: one copy each.
	if err := bus.Setup(ctx, js); err != nil {
		t.Fatal(err)
	}
	before := replicas(t, js)
	for name, n := range before {
		if n != 1 {
			t.Errorf("%s: %d replicas, want 1", name, n)
		}
	}

	// Asked for three: every one is changed to three.
	if err := bus.Setup(ctx, js, bus.Replicas(3)); err != nil {
		t.Fatal(err)
	}
	after := replicas(t, js)
	if !slices.Equal(slices.Sorted(maps.Keys(after)), slices.Sorted(maps.Keys(before))) {
		t.Errorf("streams after = %v, want %v", slices.Sorted(maps.Keys(after)), slices.Sorted(maps.Keys(before)))
	}
	for name, n := range after {
		if n != 3 {
			t.Errorf("%s: %d replicas, want 3", name, n)
		}
	}

	// A service that asks for none leaves them as they are.
	if err := bus.Setup(ctx, js); err != nil {
		t.Fatal(err)
	}
	for name, n := range replicas(t, js) {
		if n != 3 {
			t.Errorf("after a setup without replicas, %s: %d replicas, want 3", name, n)
		}
	}
}

func TestSetupReplicasInvalid(t *testing.T) {
	_, _, js := natstest.Run(t)
	for _, n := range []int{-1, bus.MaxReplicas + 1} {
		if err := bus.Setup(context.Background(), js, bus.Replicas(n)); err == nil {
			t.Errorf("Setup with %d replicas: no error", n)
		}
	}
	for _, v := range []string{"0", "6", "three", "-1"} {
		if _, err := bus.ReplicasFromEnv(func(string) string { return v }); err == nil {
			t.Errorf("CORRAL_NATS_REPLICAS=%s: no error", v)
		}
	}
	opts, err := bus.ReplicasFromEnv(func(string) string { return "" })
	if err != nil || len(opts) != 0 {
		t.Errorf("CORRAL_NATS_REPLICAS unset: %v, %v; want no option", opts, err)
	}
}

// The object stores are bounded: by default when made (or when one an
// older version made has no bound), by the bound asked for when one is;
// a Setup asking for none leaves an administrator's bound alone.
func TestSetupStoreBytes(t *testing.T) {
	_, _, js := natstest.Run(t)
	ctx := context.Background()
	maxBytes := func() int64 {
		t.Helper()
		s, err := js.Stream(ctx, "OBJ_"+bus.BucketWorkspaces)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().Config.MaxBytes
	}
	if got := maxBytes(); got != 10<<30 {
		t.Errorf("made with a bound of %d, want the default 10 GiB", got)
	}
	opts, err := bus.SetupFromEnv(func(k string) string {
		return map[string]string{"CORRAL_NATS_WORKSPACES_BYTES": "1073741824"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Setup(ctx, js, opts...); err != nil {
		t.Fatal(err)
	}
	if got := maxBytes(); got != 1<<30 {
		t.Errorf("bounded to %d after asking for 1 GiB", got)
	}
	if err := bus.Setup(ctx, js); err != nil {
		t.Fatal(err)
	}
	if got := maxBytes(); got != 1<<30 {
		t.Errorf("bounded to %d after a Setup asking for nothing, want the 1 GiB kept", got)
	}
	// As an older version made it: no bound.
	if _, err := js.UpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: bus.BucketWorkspaces, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	if err := bus.Setup(ctx, js); err != nil {
		t.Fatal(err)
	}
	if got := maxBytes(); got != 10<<30 {
		t.Errorf("an unbounded store is bounded to %d after Setup, want the default", got)
	}
	if _, err := bus.SetupFromEnv(func(k string) string { return map[string]string{"CORRAL_NATS_SKILLS_BYTES": "lots"}[k] }); err == nil {
		t.Error("CORRAL_NATS_SKILLS_BYTES=lots accepted")
	}
}
