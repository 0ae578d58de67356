// Package migrations holds the memory store's PostgreSQL schema as
// versioned migrations, embedded in the binary and applied with goose.
package migrations

import "embed"

// FS holds the migration files.
//
//go:embed *.sql
var FS embed.FS
