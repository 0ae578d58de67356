package memory_test

import (
	"context"
	"errors"
	"testing"

	"corral.dev/pkg/natstest"
	"corral.dev/pkg/pgtest"
	"corral.dev/services/memory"
	"corral.dev/services/memory/internal/storetest"
)

func TestPGStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) memory.Store {
		pool := pgtest.Pool(t)
		if err := memory.Migrate(context.Background(), pool); err != nil {
			t.Fatal(err)
		}
		return memory.NewPGStore(pool)
	})
}

func TestKVStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) memory.Store {
		_, _, js := natstest.Run(t)
		s, err := memory.NewKVStore(context.Background(), js)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// A pattern PostgreSQL cannot take as text is the pattern's fault, not
// the store's: a call that searches with it gets an error result at once
// rather than being tried again.
func TestPGStoreGrepRefusesWhatIsNotText(t *testing.T) {
	pool := pgtest.Pool(t)
	if err := memory.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	s := memory.NewPGStore(pool)
	if _, err := s.Grep(context.Background(), "acme", "ada", "/memories/", "a\x00", 10); !errors.Is(err, memory.ErrBadPattern) {
		t.Errorf("Grep with a NUL byte: %v, want ErrBadPattern", err)
	}
}
