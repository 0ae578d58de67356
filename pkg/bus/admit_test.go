package bus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
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
		Admit: func(m bus.Msg) (string, string) {
			var k keyed
			_ = json.Unmarshal(m.Data, &k)
			return k.Key, ""
		},
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
	for i := 1; i <= 5; i++ {
		publish(t, js, fmt.Sprintf("a%d", i), fmt.Appendf(nil, `{"key":"a","n":%d}`, i))
	}
	publish(t, js, "b1", []byte(`{"key":"b","n":1}`))
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
