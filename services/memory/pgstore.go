package memory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"corral.dev/services/memory/migrations"
)

// PGStore is a [Store] in PostgreSQL.
type PGStore struct {
	pool *pgxpool.Pool
}

// Migrate brings the database pool talks to up to the latest schema.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	return migrate(ctx, db)
}

func migrate(ctx context.Context, db *sql.DB) error {
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// NewPGStore returns a store on pool, whose database [Migrate] has
// brought up to date.
func NewPGStore(pool *pgxpool.Pool) *PGStore {
	return &PGStore{pool: pool}
}

const fileCols = `tenant, owner, path, version, size, updated_by, updated_at`

func scanFile(row pgx.Row, withContent bool) (File, error) {
	var f File
	dest := []any{&f.Tenant, &f.Owner, &f.Path, &f.Version, &f.Size, &f.UpdatedBy, &f.UpdatedAt}
	if withContent {
		dest = append(dest, &f.Content)
	}
	err := row.Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return File{}, ErrNotFound
	}
	return f, err
}

// Get implements [Store].
func (s *PGStore) Get(ctx context.Context, k Key) (File, error) {
	f, err := scanFile(s.pool.QueryRow(ctx, `SELECT `+fileCols+`, content FROM memory_files
		WHERE tenant = $1 AND owner = $2 AND path = $3`, k.Tenant, k.Owner, k.Path), true)
	if err != nil {
		return File{}, fmt.Errorf("get %s: %w", k, err)
	}
	return f, nil
}

// Put implements [Store].
func (s *PGStore) Put(ctx context.Context, w Write) (File, error) {
	var out File
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if f, done, err := applied(ctx, tx, w); done || err != nil {
			out = f
			return err
		}
		f := File{Key: w.Key, Content: w.Content, Size: len(w.Content), UpdatedBy: w.By}
		if w.Expect == 0 {
			if w.MaxFiles > 0 {
				var n int
				if err := tx.QueryRow(ctx, `SELECT count(*) FROM memory_files WHERE tenant = $1`, w.Tenant).Scan(&n); err != nil {
					return err
				}
				if n >= w.MaxFiles {
					return fmt.Errorf("%w: tenant %s has %d files, the most it may have", ErrTooMany, w.Tenant, n)
				}
			}
			tag, err := tx.Exec(ctx, `INSERT INTO memory_files (tenant, owner, path, version, content, size, updated_by)
				SELECT $1, $2, $3, coalesce(max(version), 0) + 1, $4, $5, $6 FROM memory_versions
				WHERE tenant = $1 AND owner = $2 AND path = $3
				ON CONFLICT DO NOTHING`, w.Tenant, w.Owner, w.Path, w.Content, len(w.Content), w.By)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return conflict(ctx, tx, w)
			}
		} else {
			tag, err := tx.Exec(ctx, `UPDATE memory_files SET version = version + 1, content = $4, size = $5,
				updated_by = $6, updated_at = now()
				WHERE tenant = $1 AND owner = $2 AND path = $3 AND version = $7`,
				w.Tenant, w.Owner, w.Path, w.Content, len(w.Content), w.By, w.Expect)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return conflict(ctx, tx, w)
			}
		}
		err := tx.QueryRow(ctx, `INSERT INTO memory_versions (tenant, owner, path, version, content, size, changed_by, changed_at, op)
			SELECT tenant, owner, path, version, content, size, updated_by, updated_at, $4 FROM memory_files
			WHERE tenant = $1 AND owner = $2 AND path = $3
			RETURNING version, changed_at`, w.Tenant, w.Owner, w.Path, w.Op).Scan(&f.Version, &f.UpdatedAt)
		if err != nil {
			return err
		}
		out = f
		return prune(ctx, tx, w.Key, f.Version, w.MaxBytes)
	})
	if errors.Is(err, errApplied) {
		err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			f, _, err := applied(ctx, tx, w)
			out = f
			return err
		})
	}
	if err != nil {
		return File{}, fmt.Errorf("put %s: %w", w.Key, err)
	}
	return out, nil
}

// errApplied rolls back a write that found its own op applied meanwhile.
var errApplied = errors.New("applied already")

// applied returns the change w.Op made, if it was applied already.
func applied(ctx context.Context, tx pgx.Tx, w Write) (File, bool, error) {
	f := File{Key: w.Key}
	var content *string
	err := tx.QueryRow(ctx, `SELECT version, content, size, changed_by, changed_at FROM memory_versions
		WHERE op = $1 AND tenant = $2 AND owner = $3 AND path = $4`, w.Op, w.Tenant, w.Owner, w.Path).
		Scan(&f.Version, &content, &f.Size, &f.UpdatedBy, &f.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return File{}, false, nil
	}
	if err != nil {
		return File{}, false, err
	}
	if content != nil {
		f.Content = *content
	}
	return f, true, nil
}

// conflict says why a write expecting w.Expect found something else:
// errApplied when it was w itself, handled at the same time elsewhere and
// committed while this one waited.
func conflict(ctx context.Context, tx pgx.Tx, w Write) error {
	if _, done, err := applied(ctx, tx, w); err != nil || done {
		if done {
			return errApplied
		}
		return err
	}
	var v int64
	err := tx.QueryRow(ctx, `SELECT version FROM memory_files WHERE tenant = $1 AND owner = $2 AND path = $3`,
		w.Tenant, w.Owner, w.Path).Scan(&v)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if w.Expect == 0 {
			return fmt.Errorf("%w: created meanwhile", ErrConflict)
		}
		return fmt.Errorf("%w: expected version %d, but the file does not exist", ErrConflict, w.Expect)
	case err != nil:
		return err
	}
	return &ConflictError{Expected: w.Expect, Current: v}
}

// Delete implements [Store].
func (s *PGStore) Delete(ctx context.Context, w Write) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, done, err := applied(ctx, tx, w); done || err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `WITH gone AS (
				DELETE FROM memory_files WHERE tenant = $1 AND owner = $2 AND path = $3 AND version = $4
				RETURNING tenant, owner, path, version)
			INSERT INTO memory_versions (tenant, owner, path, version, content, size, changed_by, op)
			SELECT tenant, owner, path, version + 1, NULL, 0, $5, $6 FROM gone`,
			w.Tenant, w.Owner, w.Path, w.Expect, w.By, w.Op)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			// Done meanwhile by a copy of this very operation?
			if _, done, err := applied(ctx, tx, w); done || err != nil {
				return err
			}
			var v int64
			err := tx.QueryRow(ctx, `SELECT version FROM memory_files WHERE tenant = $1 AND owner = $2 AND path = $3`,
				w.Tenant, w.Owner, w.Path).Scan(&v)
			if errors.Is(err, pgx.ErrNoRows) {
				return ErrNotFound
			}
			if err != nil {
				return err
			}
			return &ConflictError{Expected: w.Expect, Current: v}
		}
		return prune(ctx, tx, w.Key, w.Expect+1, 0)
	})
	if err != nil {
		return fmt.Errorf("delete %s: %w", w.Key, err)
	}
	return nil
}

// likePrefix escapes prefix for a LIKE pattern matching what starts with it.
func likePrefix(prefix string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return r.Replace(prefix) + "%"
}

// List implements [Store].
func (s *PGStore) List(ctx context.Context, tenant, user, prefix string) ([]File, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+fileCols+` FROM memory_files
		WHERE tenant = $1 AND owner IN ('', $2) AND path LIKE $3 ORDER BY path`, tenant, user, likePrefix(prefix))
	if err != nil {
		return nil, fmt.Errorf("list %s:%s: %w", tenant, prefix, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (File, error) { return scanFile(row, false) })
	if err != nil {
		return nil, fmt.Errorf("list %s:%s: %w", tenant, prefix, err)
	}
	return out, nil
}

// Grep implements [Store]. The search runs in the database: each file is
// split into lines there and matched with PostgreSQL's regular
// expressions, whose syntax agrees with Go's for everyday patterns.
func (s *PGStore) Grep(ctx context.Context, tenant, user, prefix, pattern string, limit int) ([]Match, error) {
	if _, err := regexp.Compile(pattern); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadPattern, err)
	}
	pattern = postgresRegexp(pattern)
	rows, err := s.pool.Query(ctx, `SELECT f.path, l.n, l.line FROM memory_files f,
			regexp_split_to_table(f.content, E'\n') WITH ORDINALITY AS l(line, n)
		WHERE f.tenant = $1 AND f.owner IN ('', $2) AND f.path LIKE $3 AND l.line ~ $4
		ORDER BY f.path, l.n LIMIT $5`, tenant, user, likePrefix(prefix), pattern, limit)
	if err != nil {
		return nil, grepErr(tenant, prefix, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Match, error) {
		var m Match
		err := row.Scan(&m.Path, &m.Line, &m.Text)
		return m, err
	})
	if err != nil {
		return nil, grepErr(tenant, prefix, err)
	}
	return out, nil
}

// postgresRegexp rewrites the word-boundary escapes of Go's syntax, \b and
// \B, as PostgreSQL's, \y and \Y (in PostgreSQL \b is a backspace).
func postgresRegexp(pattern string) string {
	var b strings.Builder
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		if c != '\\' || i+1 == len(pattern) {
			b.WriteByte(c)
			continue
		}
		i++
		switch pattern[i] {
		case 'b':
			b.WriteString(`\y`)
		case 'B':
			b.WriteString(`\Y`)
		default:
			b.WriteByte('\\')
			b.WriteByte(pattern[i])
		}
	}
	return b.String()
}

// grepErr is a search's error: the pattern's fault when the server says
// the data it was given is (class 22, data exception: an invalid regular
// expression, a byte sequence that is not text), so that it becomes the
// call's result rather than a failure tried again.
func grepErr(tenant, prefix string, err error) error {
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && strings.HasPrefix(pgErr.Code, "22") {
		return fmt.Errorf("%w: %s", ErrBadPattern, pgErr.Message)
	}
	return fmt.Errorf("grep %s:%s: %w", tenant, prefix, err)
}

// History implements [Store].
func (s *PGStore) History(ctx context.Context, k Key) ([]Change, error) {
	rows, err := s.pool.Query(ctx, `SELECT version, content IS NULL, size, changed_by, changed_at, op FROM memory_versions
		WHERE tenant = $1 AND owner = $2 AND path = $3 ORDER BY version`, k.Tenant, k.Owner, k.Path)
	if err != nil {
		return nil, fmt.Errorf("history %s: %w", k, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Change, error) {
		var c Change
		err := row.Scan(&c.Version, &c.Deleted, &c.Size, &c.ChangedBy, &c.ChangedAt, &c.Op)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("history %s: %w", k, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("history %s: %w", k, ErrNotFound)
	}
	return out, nil
}

// Version implements [Store].
func (s *PGStore) Version(ctx context.Context, k Key, v int64) (File, error) {
	f := File{Key: k}
	var content *string
	err := s.pool.QueryRow(ctx, `SELECT version, content, size, changed_by, changed_at FROM memory_versions
		WHERE tenant = $1 AND owner = $2 AND path = $3 AND version = $4`, k.Tenant, k.Owner, k.Path, v).
		Scan(&f.Version, &content, &f.Size, &f.UpdatedBy, &f.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && content == nil {
		return File{}, fmt.Errorf("%s version %d: %w", k, v, ErrNotFound)
	}
	if err != nil {
		return File{}, fmt.Errorf("%s version %d: %w", k, v, err)
	}
	f.Content = *content
	return f, nil
}

// prune drops the versions of k older than its last [Versions], latest
// being its newest. Then, while the tenant stores more than maxBytes (if
// above 0), it drops the tenant's oldest versions that are not a file's
// latest, and fails with ErrFull if that is not enough. The trigger of
// memory_versions keeps memory_usage, whose row the write holds locked
// from its new version on, so a tenant's writes prune one at a time.
func prune(ctx context.Context, tx pgx.Tx, k Key, latest, maxBytes int64) error {
	if _, err := tx.Exec(ctx, `DELETE FROM memory_versions WHERE tenant = $1 AND owner = $2 AND path = $3 AND version <= $4`,
		k.Tenant, k.Owner, k.Path, latest-Versions); err != nil {
		return fmt.Errorf("prune: %w", err)
	}
	if maxBytes <= 0 {
		return nil
	}
	stored, err := storedBytes(ctx, tx, k.Tenant)
	if err != nil || stored <= maxBytes {
		return err
	}
	_, err = tx.Exec(ctx, `WITH kept AS (
			SELECT owner, path, version, size, changed_at, max(version) OVER (PARTITION BY owner, path) AS latest
			FROM memory_versions WHERE tenant = $1
		), old AS (
			SELECT owner, path, version, sum(size) OVER (ORDER BY changed_at, version, owner, path) - size AS freed_before
			FROM kept WHERE version < latest
		)
		DELETE FROM memory_versions v USING old
		WHERE v.tenant = $1 AND v.owner = old.owner AND v.path = old.path AND v.version = old.version
			AND old.freed_before < $2`, k.Tenant, stored-maxBytes)
	if err != nil {
		return fmt.Errorf("prune %s: %w", k.Tenant, err)
	}
	if stored, err = storedBytes(ctx, tx, k.Tenant); err != nil {
		return err
	}
	if stored > maxBytes {
		return fullError(k.Tenant, stored, maxBytes)
	}
	return nil
}

func storedBytes(ctx context.Context, tx pgx.Tx, tenant string) (int64, error) {
	var n int64
	err := tx.QueryRow(ctx, `SELECT bytes FROM memory_usage WHERE tenant = $1`, tenant).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("stored bytes of %s: %w", tenant, err)
	}
	return n, nil
}
