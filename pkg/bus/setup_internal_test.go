package bus

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Setup tries again when the server cannot place a replicated stream for
// a server offline (a cluster forming), and not when it lacks servers.
func TestPeerOffline(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{&jetstream.APIError{Code: 500, ErrorCode: errNoSuitablePeers, Description: "no suitable peers for placement, peer offline"}, true},
		{&jetstream.APIError{Code: 500, ErrorCode: errNoSuitablePeers, Description: "no suitable peers for placement, insufficient resources"}, false},
		{&jetstream.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use with a different configuration"}, false},
		{fmt.Errorf("connection closed"), false},
	}
	for _, tc := range tests {
		err := setupError("kv placements", tc.err)
		if got := peerOffline(err); got != tc.want {
			t.Errorf("peerOffline(%v) = %v, want %v", err, got, tc.want)
		}
	}
}

// lossyJS loses the answer to the first stream it creates, as a route
// between two servers of a cluster forming can: the stream is created, and
// the request waits until its context ends.
type lossyJS struct {
	jetstream.JetStream
	lost atomic.Bool
}

func (js *lossyJS) CreateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := js.JetStream.CreateStream(ctx, cfg)
	if err == nil && js.lost.CompareAndSwap(false, true) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s, err
}

// Setup asks again when an answer is lost, rather than waiting for it
// until its context ends.
func TestSetupAnswerLost(t *testing.T) {
	defer func(d time.Duration) { attemptTimeout = d }(attemptTimeout)
	attemptTimeout = 500 * time.Millisecond
	s, err := StartServer(ServerConfig{Host: "127.0.0.1", Port: -1, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	lossy := &lossyJS{JetStream: js}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if err := Setup(ctx, lossy); err != nil {
		t.Fatalf("setup after %v: %v", time.Since(start).Round(time.Millisecond), err)
	}
	if !lossy.lost.Load() {
		t.Fatal("no answer was lost")
	}
}
