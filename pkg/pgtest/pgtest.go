// Package pgtest gives tests a PostgreSQL schema of their own on the server
// named by TEST_DATABASE_URL.
//
// Without TEST_DATABASE_URL a test that needs the database is skipped,
// unless CI=true, where it fails: scripts/test.sh sets the variable to the
// local server, and in CI a database test that cannot run must not pass.
package pgtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// URL returns TEST_DATABASE_URL, skipping the test when it is unset
// (failing it under CI=true).
func URL(t testing.TB) string {
	t.Helper()
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("TEST_DATABASE_URL is unset, and CI needs the database tests to run (scripts/test.sh sets it)")
		}
		t.Skip("TEST_DATABASE_URL is unset; scripts/test.sh sets it to the local PostgreSQL")
	}
	return url
}

// Schema creates a fresh schema, dropped when the test ends, and returns a
// connection string whose connections use it. A server that cannot be
// reached fails the test.
func Schema(t testing.TB) string {
	t.Helper()
	url := URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect to TEST_DATABASE_URL: %v", err)
	}
	defer conn.Close(ctx)
	name := "test_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("drop schema %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+name+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return fmt.Sprintf("%s%ssearch_path=%s", url, sep, name)
}

// Pool returns a pool on a fresh schema (see [Schema]), closed when the
// test ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, Schema(t))
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(pool.Close)
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	return pool
}
