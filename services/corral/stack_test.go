package main

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
)

// A stack stops its services last started first, each once those after
// it have returned, whether the process stops or a service fails.
func TestStackStopsInReverseOrder(t *testing.T) {
	for _, tc := range []struct {
		name    string
		failing string // the service that fails at once, if any
	}{
		{name: "stopped"},
		{name: "a service fails", failing: "approval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var stopped []string
			running := map[string]bool{}
			s := newStack()
			names := []string{"auth", "memory", "sandbox-manager", "approval", "harness"}
			boom := errors.New("boom")
			for _, name := range names {
				mu.Lock()
				running[name] = true
				mu.Unlock()
				s.start(context.Background(), name, func(ctx context.Context) error {
					if name == tc.failing {
						mu.Lock()
						defer mu.Unlock()
						running[name] = false
						stopped = append(stopped, name)
						return boom
					}
					<-ctx.Done()
					mu.Lock()
					defer mu.Unlock()
					// Those started after it have stopped already.
					for _, later := range names[slices.Index(names, name)+1:] {
						if running[later] {
							t.Errorf("%s stopped while %s, started after it, ran", name, later)
						}
					}
					running[name] = false
					stopped = append(stopped, name)
					return nil
				})
			}
			ctx, cancel := context.WithCancel(context.Background())
			if tc.failing == "" {
				cancel()
			}
			defer cancel()
			err := s.wait(ctx)
			if tc.failing != "" && !errors.Is(err, boom) {
				t.Errorf("wait: %v, want the failure", err)
			}
			if tc.failing == "" && err != nil {
				t.Errorf("wait: %v", err)
			}
			want := slices.Clone(names)
			slices.Reverse(want)
			if tc.failing != "" {
				want = append([]string{tc.failing}, slices.DeleteFunc(want, func(n string) bool { return n == tc.failing })...)
			}
			if !slices.Equal(stopped, want) {
				t.Errorf("stopped %v, want %v", stopped, want)
			}
		})
	}
}
