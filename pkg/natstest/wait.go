package natstest

import (
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
