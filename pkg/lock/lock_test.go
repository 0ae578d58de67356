package lock

import (
	"context"
	"sync"
	"testing"
	"time"
)

func TestKeyedSerialisesOneKey(t *testing.T) {
	var k Keyed
	var mu sync.Mutex
	inside, most := 0, 0
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unlock, err := k.Lock(context.Background(), "a")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			inside++
			most = max(most, inside)
			mu.Unlock()
			time.Sleep(time.Millisecond) // hold it a moment, so overlaps would show
			mu.Lock()
			inside--
			mu.Unlock()
			unlock()
		}()
	}
	wg.Wait()
	if most != 1 {
		t.Errorf("%d holders at once, want 1", most)
	}
	if k.Held("a") || len(k.locks) != 0 {
		t.Errorf("locks left behind: %v", k.locks)
	}
}

func TestKeyedOtherKeysAndCancel(t *testing.T) {
	var k Keyed
	unlockA, _ := k.Lock(context.Background(), "a")
	unlockB, err := k.Lock(context.Background(), "b") // another key does not wait
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := k.Lock(ctx, "a"); err == nil {
		t.Error("Lock of a held key with a done ctx returned nil error")
	}
	unlockA()
	unlockB()
	if len(k.locks) != 0 {
		t.Errorf("locks left behind: %v", k.locks)
	}
}

func TestKeyedTryLock(t *testing.T) {
	var k Keyed
	unlock, ok := k.TryLock("a")
	if !ok {
		t.Fatal("TryLock of a free key failed")
	}
	if _, ok := k.TryLock("a"); ok {
		t.Error("TryLock took a held key")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := k.Lock(ctx, "a"); err == nil {
		t.Error("Lock took a key TryLock holds")
	}
	if other, ok := k.TryLock("b"); !ok {
		t.Error("TryLock of another key failed")
	} else {
		other()
	}
	unlock()
	again, err := k.Lock(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	again()
	if k.Held("a") || len(k.locks) != 0 {
		t.Errorf("locks left behind: %v", k.locks)
	}
}

// Wait takes the key once its holder lets go, and holds it against Lock
// and TryLock meanwhile.
func TestKeyedWait(t *testing.T) {
	var k Keyed
	unlock, _ := k.Lock(context.Background(), "a")
	got := make(chan func())
	go func() { got <- k.Wait("a") }()
	select {
	case <-got:
		t.Fatal("Wait took a held key")
	case <-time.After(20 * time.Millisecond):
	}
	unlock()
	unlockW := <-got
	if _, ok := k.TryLock("a"); ok {
		t.Error("TryLock took a key Wait holds")
	}
	unlockW()
	if k.Held("a") {
		t.Errorf("locks left behind: %v", k.locks)
	}
}
