package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"corral.dev/pkg/bus"
	"corral.dev/pkg/natstest"
)

type keyed struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

// publishKeyed publishes n messages of key a, then one of key b.
func publishKeyed(t *testing.T, js jetstream.JetStream, n int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		publish(t, js, fmt.Sprintf("a%d", i), fmt.Appendf(nil, `{"key":"a","n":%d}`, i))
	}
	publish(t, js, "b1", []byte(`{"key":"b","n":1}`))
}

// admitByKey admits messages by their body's key.
func admitByKey(m bus.Msg) (string, string) {
	var k keyed
	_ = json.Unmarshal(m.Data, &k)
	return k.Key, ""
}

// With one slot, messages of a key that is busy wait without it: a message
// of another key, published after them all, is handled while the first
// key's first message still runs, and the first key's messages are handled
// one at a time in the order published. A handler that yields gives its
// slot to others but keeps its key.
func TestConsumeAdmitByKey(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	release := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var order []string
	consume(t, js, bus.Consumer{
		Concurrency: 1,
		// Messages waiting for their key are pending acks too.
		Config: jetstream.ConsumerConfig{MaxAckPending: 16},
		Admit:  admitByKey,
		Handler: bus.Decode(func(ctx context.Context, k *keyed) error {
			mu.Lock()
			order = append(order, fmt.Sprintf("%s%d", k.Key, k.N))
			mu.Unlock()
			if k.Key == "a" && k.N == 1 {
				bus.Yield(ctx) // waits for work done elsewhere
				<-release
			}
			return nil
		}),
	})
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before consume's
	publishKeyed(t, js, 5)
	natstest.WaitFor(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if !slices.Contains(order, "b1") {
			return fmt.Errorf("handled %v, want b1 while a1 runs", order)
		}
		return nil
	})
	once.Do(func() { close(release) })
	natstest.WaitFor(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if want := []string{"a1", "b1", "a2", "a3", "a4", "a5"}; !slices.Equal(order, want) {
			return fmt.Errorf("handled %v, want %v", order, want)
		}
		return nil
	})
}

// With MaxKeyWaiting, a key whose handler runs long keeps at most that
// many messages waiting behind it: one more is given up at once as busy
// (its reason says so, and it is dead-lettered), not kept pending. The
// server's pending set, which a flood behind one key would fill, stays
// open to the other keys: with room for four pending messages, a message
// of another key, published after ten of the busy key, is handled while
// the busy key's first still runs. Those kept are handled in order once it
// is done.
func TestConsumeMaxKeyWaiting(t *testing.T) {
	t.Parallel()
	_, _, js := natstest.Run(t)
	release := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var order, busy []string
	consume(t, js, bus.Consumer{
		Concurrency:   2,
		MaxKeyWaiting: 2,
		Config:        jetstream.ConsumerConfig{MaxAckPending: 4},
		Admit:         admitByKey,
		Handler: bus.Decode(func(ctx context.Context, k *keyed) error {
			mu.Lock()
			order = append(order, fmt.Sprintf("%s%d", k.Key, k.N))
			mu.Unlock()
			if k.Key == "a" && k.N == 1 {
				<-release
			}
			return nil
		}),
		OnGiveUp: func(_ context.Context, m bus.Msg, reason error) error {
			var k keyed
			_ = json.Unmarshal(m.Data, &k)
			if !errors.Is(reason, bus.ErrBusy) || !strings.Contains(reason.Error(), "2 messages of a already wait") {
				t.Errorf("a%d given up for %v, want it busy", k.N, reason)
			}
			mu.Lock()
			busy = append(busy, fmt.Sprintf("%s%d", k.Key, k.N))
			mu.Unlock()
			return nil
		},
	})
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before consume's
	publishKeyed(t, js, 10)
	natstest.WaitFor(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if !slices.Contains(order, "b1") {
			return fmt.Errorf("handled %v, given up %v; want b1 while a1 runs", order, busy)
		}
		return nil
	})
	once.Do(func() { close(release) })
	natstest.WaitFor(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if want := []string{"a1", "b1", "a2", "a3"}; !slices.Equal(order, want) {
			return fmt.Errorf("handled %v, want %v", order, want)
		}
		slices.Sort(busy) // given up each on its own
		if want := []string{"a10", "a4", "a5", "a6", "a7", "a8", "a9"}; !slices.Equal(busy, want) {
			return fmt.Errorf("given up %v, want %v", busy, want)
		}
		return nil
	})
}
