package migrations_test

import (
	"context"
	"testing"
	"time"

	"github.com/pressly/goose/v3/lock"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/migrations"
)

// Check (what every `searchsync run` does at start-up) reads the version
// without the migration lock: a migration running elsewhere in the same
// database — another schema's, or this one's — does not delay it. Before, it
// took goose's database-wide session lock, retried every 5s, so one relay
// of three started ≈ 5s late whenever a test or a relay held the lock.
func TestCheckDoesNotWaitForTheMigrationLock(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, id := range []int64{lock.DefaultLockID, migrations.LockID(db.Schema)} {
		if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", id); err != nil {
			t.Fatal(err)
		}
		defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", id)
	}
	m, err := migrations.New(ctx, db.URL, db.Schema, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := m.Check(cctx); err != nil {
		t.Fatalf("Check with the lock held elsewhere: %v", err)
	}
	took := time.Since(start)
	t.Logf("Check with the migration lock held elsewhere took %s", took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("Check took %s with the migration lock held elsewhere; want no wait on the lock", took.Round(time.Millisecond))
	}
}

// Migrations of different schemas do not wait for each other: the lock is
// per schema.
func TestUpOfAnotherSchemaDoesNotWait(t *testing.T) {
	t.Parallel()
	held := testenv.NewDB(t)
	ctx := context.Background()
	conn, err := held.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrations.LockID(held.Schema)); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", migrations.LockID(held.Schema))
	start := time.Now()
	other := testenv.NewDB(t) // migrates a fresh schema
	took := time.Since(start)
	t.Logf("up of schema %s while %s's lock is held took %s", other.Schema, held.Schema, took.Round(time.Millisecond))
	if took > 4*time.Second {
		t.Errorf("up of another schema took %s while one schema's migration lock was held; want no wait", took.Round(time.Millisecond))
	}
	if migrations.LockID(held.Schema) == migrations.LockID(other.Schema) {
		t.Errorf("schemas %s and %s share lock id %d", held.Schema, other.Schema, migrations.LockID(held.Schema))
	}
}
