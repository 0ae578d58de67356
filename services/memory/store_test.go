package memory_test

import (
	"context"
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
