package memory_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"corral.dev/pkg/pgtest"
	"corral.dev/services/memory"
	"corral.dev/services/memory/migrations"
)

// A database holding files from before the bound on stored bytes counts
// them once migrated: the bound applies to what was there.
func TestMigrationCountsStoredBytes(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 2); err != nil {
		t.Fatal(err)
	}
	for v := range 3 {
		if _, err := pool.Exec(ctx, `INSERT INTO memory_versions (tenant, path, version, content, size, changed_by, op)
			VALUES ('acme', '/memories/old.md', $1, repeat('x', 400), 400, 'ada', $2)`, v+1, uuid.New()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO memory_files (tenant, path, version, content, size, updated_by)
		VALUES ('acme', '/memories/old.md', 3, repeat('x', 400), 400, 'ada')`); err != nil {
		t.Fatal(err)
	}
	if err := memory.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	s := memory.NewPGStore(pool)
	// 1200 bytes stored; 300 more fit in 1000 only by pruning two old versions.
	_, err = s.Put(ctx, memory.Write{Key: memory.Key{Tenant: "acme", Path: "/memories/new.md"}, Content: strings.Repeat("y", 300), By: "ada", Op: uuid.New(), MaxBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.History(ctx, memory.Key{Tenant: "acme", Path: "/memories/old.md"})
	if err != nil || len(h) != 1 || h[0].Version != 3 {
		t.Errorf("old.md's history = %+v, %v; want only its version 3", h, err)
	}
}
