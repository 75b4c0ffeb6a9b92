// Package migrations owns searchsync's database schema: the outbox table
// (AA_OUTBOX_EVENT exactly as the spec gives it), AA_JOB and the relay's
// bookkeeping tables. The SQL files are embedded and applied with goose into one
// configurable schema (default mdm): the migrator sets search_path to that
// schema, so the files themselves name no schema.
//
// Up is idempotent and safe to run from several processes at once (a PostgreSQL
// session advisory lock, one per schema, serialises them); it refuses a
// database that a newer searchsync already migrated. Check, which every
// `searchsync run` calls at start-up, reads the recorded version without that
// lock, so relays starting together (or beside a migration of another schema)
// never wait for each other.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/pressly/goose/v3/lock"
)

//go:embed sql/*.sql
var files embed.FS

// VersionTable is the table, inside the configured schema, in which goose
// records the applied migrations.
const VersionTable = "searchsync_schema_version"

// ErrNewerSchema reports a database migrated by a newer searchsync.
var ErrNewerSchema = errors.New("database schema is newer than this searchsync")

// Status is one migration and whether it is applied.
type Status struct {
	Version   int64  `json:"version"`
	Name      string `json:"name"`
	Applied   bool   `json:"applied"`
	AppliedAt string `json:"applied_at,omitempty"`
}

// Migrator applies the embedded migrations to one schema.
type Migrator struct {
	db       *sql.DB
	schema   string
	store    database.Store
	provider *goose.Provider
}

// lockID is the advisory lock that serialises the migrations of one schema:
// goose's default id is one for the whole database, which made the
// migrations of unrelated schemas (every test's, every tenant's) queue
// behind each other.
func lockID(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("searchsync migrations\x00" + schema))
	return int64(h.Sum64() &^ (1 << 63))
}

// New opens a migrator for the database at url and the given schema. The schema
// is created when it does not exist. Close releases the connection.
func New(ctx context.Context, url, schema string, logger *slog.Logger) (*Migrator, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("migrations: parse database url: %w", err)
	}
	cfg.RuntimeParams["search_path"] = schema
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(2)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("migrations: connect: %w", err)
	}
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
		db.Close()
		return nil, fmt.Errorf("migrations: create schema %q: %w", schema, err)
	}
	sub, err := fs.Sub(files, "sql")
	if err != nil {
		db.Close()
		return nil, err
	}
	store, err := database.NewStore(database.DialectPostgres, VersionTable)
	if err != nil {
		db.Close()
		return nil, err
	}
	// Retried every second (goose's default is every 5s) for 5 minutes.
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(lockID(schema)), lock.WithLockTimeout(1, 300))
	if err != nil {
		db.Close()
		return nil, err
	}
	opts := []goose.ProviderOption{goose.WithStore(store), goose.WithSessionLocker(locker), goose.WithDisableGlobalRegistry(true)}
	if logger != nil {
		opts = append(opts, goose.WithSlog(logger))
	}
	p, err := goose.NewProvider("", db, sub, opts...)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return &Migrator{db: db, schema: schema, store: store, provider: p}, nil
}

// Close releases the migrator's connections.
func (m *Migrator) Close() error { return m.db.Close() }

// Latest is the newest migration version this binary knows.
func (m *Migrator) Latest() int64 {
	src := m.provider.ListSources()
	return src[len(src)-1].Version
}

// version reads the highest recorded version without the migration lock
// (goose's GetDBVersion takes it, and retries it only every few seconds). A
// schema without the version table is at version 0. A migration running
// meanwhile is seen as not applied yet (its transaction has not committed).
func (m *Migrator) version(ctx context.Context) (int64, error) {
	v, err := m.store.GetLatestVersion(ctx, m.db)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42P01", errors.Is(err, database.ErrVersionNotFound): // undefined_table
		return 0, nil
	case err != nil:
		return 0, err
	}
	return v, nil
}

// checkNotNewer refuses a database migrated past what this binary knows.
func (m *Migrator) checkNotNewer(ctx context.Context) (int64, error) {
	current, err := m.version(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrations: read version of schema %q: %w", m.schema, err)
	}
	if latest := m.Latest(); current > latest {
		return current, fmt.Errorf("%w: schema %q is at version %d, this binary knows up to %d; upgrade searchsync", ErrNewerSchema, m.schema, current, latest)
	}
	return current, nil
}

// Up applies every pending migration and returns the versions it applied.
func (m *Migrator) Up(ctx context.Context) ([]int64, error) {
	if _, err := m.checkNotNewer(ctx); err != nil {
		return nil, err
	}
	res, err := m.provider.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: up in schema %q: %w", m.schema, err)
	}
	applied := make([]int64, 0, len(res))
	for _, r := range res {
		applied = append(applied, r.Source.Version)
	}
	return applied, nil
}

// Status lists every known migration and whether it is applied.
func (m *Migrator) Status(ctx context.Context) ([]Status, error) {
	if _, err := m.checkNotNewer(ctx); err != nil {
		return nil, err
	}
	st, err := m.provider.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: status of schema %q: %w", m.schema, err)
	}
	out := make([]Status, 0, len(st))
	for _, s := range st {
		row := Status{Version: s.Source.Version, Name: s.Source.Path, Applied: s.State == goose.StateApplied}
		if row.Applied {
			row.AppliedAt = s.AppliedAt.UTC().Format("2006-01-02T15:04:05Z")
		}
		out = append(out, row)
	}
	return out, nil
}

// Check returns nil when the schema is migrated to exactly what this binary
// knows, and an error that says what to run otherwise. `searchsync run` calls it
// at start-up.
func (m *Migrator) Check(ctx context.Context) error {
	current, err := m.checkNotNewer(ctx)
	if err != nil {
		return err
	}
	if latest := m.Latest(); current < latest {
		return fmt.Errorf("migrations: schema %q is at version %d, %d is required: run `searchsync migrate up`", m.schema, current, latest)
	}
	return nil
}
