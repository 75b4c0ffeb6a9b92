package migrations

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/pressly/goose/v3/database"
)

// CreateFresh creates schema, which must not exist, with every migration
// applied, in one transaction: the Up sections of the same files, and the
// same rows in the version table, that Up records, so that Check, Status and
// Up see a schema migrated to Latest. It skips what makes Up safe on a live
// database (the lock, reading the version, one transaction per migration),
// which a schema nobody else knows of yet does not need: it is how the
// tests give each test its own schema, several times faster than Up.
//
// db is a database/sql handle on the server (pgx's stdlib driver); the
// search_path is set for the transaction only.
func CreateFresh(ctx context.Context, db *sql.DB, schema string) error {
	ups, versions, err := upSections()
	if err != nil {
		return err
	}
	store, err := database.NewStore(database.DialectPostgres, VersionTable)
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrations: create schema %q: %w", schema, err)
	}
	defer func() { _ = tx.Rollback() }() // a no-op after Commit
	ident := pgx.Identifier{schema}.Sanitize()
	if _, err := tx.ExecContext(ctx, "CREATE SCHEMA "+ident+"; SET LOCAL search_path TO "+ident); err != nil {
		return fmt.Errorf("migrations: create schema %q: %w", schema, err)
	}
	if err := store.CreateVersionTable(ctx, tx); err != nil {
		return fmt.Errorf("migrations: create version table in %q: %w", schema, err)
	}
	for _, v := range append([]int64{0}, versions...) {
		if err := store.Insert(ctx, tx, database.InsertRequest{Version: v}); err != nil {
			return fmt.Errorf("migrations: record version %d in %q: %w", v, schema, err)
		}
	}
	for i, up := range ups {
		// One simple-protocol round trip runs every statement of the file.
		if _, err := tx.ExecContext(ctx, up); err != nil {
			return fmt.Errorf("migrations: version %d in %q: %w", versions[i], schema, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrations: create schema %q: %w", schema, err)
	}
	return nil
}

// upSections returns the Up part of every embedded migration, in version
// order, and the versions. A file with a goose annotation other than Up,
// Down and the statement markers (NO TRANSACTION, say) is refused: running it
// inside one transaction might not be what Up does.
func upSections() (ups []string, versions []int64, err error) {
	entries, err := fs.ReadDir(files, "sql")
	if err != nil {
		return nil, nil, err
	}
	for _, e := range entries {
		var v int64
		if _, err := fmt.Sscanf(e.Name(), "%d_", &v); err != nil {
			return nil, nil, fmt.Errorf("migrations: %s: no version in the name", e.Name())
		}
		b, err := fs.ReadFile(files, "sql/"+e.Name())
		if err != nil {
			return nil, nil, err
		}
		var up strings.Builder
		in := false
		for line := range strings.Lines(string(b)) {
			t := strings.TrimSpace(line)
			if a, ok := strings.CutPrefix(t, "-- +goose "); ok {
				switch strings.TrimSpace(a) {
				case "Up":
					in = true
				case "Down":
					in = false
				case "StatementBegin", "StatementEnd":
				default:
					return nil, nil, fmt.Errorf("migrations: %s: CreateFresh does not handle %q", e.Name(), t)
				}
				continue
			}
			if in {
				up.WriteString(line)
			}
		}
		ups = append(ups, up.String())
		versions = append(versions, v)
	}
	return ups, versions, nil
}
