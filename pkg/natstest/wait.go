package natstest

import (
	"context"
	"sync"
	"testing"
	"time"
)

// WaitFor polls f until it returns nil, failing the test with f's last
// error once timeout has passed.
func WaitFor(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Serve runs a service's run function until the test ends or stop is
// called, whichever comes first, and fails the test if it returns an
// error. stop cancels run's context and waits for run to return; it may be
// called more than once.
func Serve(t testing.TB, run func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
