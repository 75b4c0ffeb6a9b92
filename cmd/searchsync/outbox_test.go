package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/searchsync/searchsync/compaction"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
)

// outboxCLI runs `searchsync <args>` against db's schema.
func outboxCLI(t *testing.T, db *testenv.DB, args ...string) (string, string, int) {
	t.Helper()
	cfg := writeConfig(t, fmt.Sprintf("database: {url: %q, schema: %s}\n", db.URL, db.Schema))
	return runCLI(t, []string{"DATABASE_URL=", "SEARCHSYNC_SCHEMA="}, append([]string{"-c", cfg}, args...)...)
}

func seedOutbox(t *testing.T, db *testenv.DB) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), `
INSERT INTO aa_outbox_event (event_type, aggregate_type, aggregate_id, payload, status, attempts, last_error, dispatched_at)
VALUES ('entity.customer.updated', 'DDM_ENTITY', '11111111-1111-1111-1111-111111111111', '{}', 'failed', 10, 'hook: HTTP 422', NULL),
       ('entity.customer.updated', 'DDM_ENTITY', '11111111-1111-1111-1111-111111111111', '{}', 'pending', 0, NULL, NULL),
       ('role.granted', 'AA_ROLE', NULL, '{}', 'skipped', 0, NULL, NULL),
       ('entity.customer.created', 'DDM_ENTITY', '22222222-2222-2222-2222-222222222222', '{}', 'dispatched', 0, NULL, now() - interval '11 days')`)
	if err != nil {
		t.Fatal(err)
	}
}

func TestOutboxCommands(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	seedOutbox(t, db)
	ctx := context.Background()

	out, stderr, code := outboxCLI(t, db, "outbox", "status", "--json")
	if code != 0 {
		t.Fatalf("outbox status: %d %s", code, stderr)
	}
	var rep outbox.StatusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if rep.Total != 4 || rep.ByStatus["failed"] != 1 || rep.BlockedCount != 1 || rep.Blocked[0].HeadID != 1 || rep.Blocked[0].Waiting != 1 {
		t.Fatalf("status: %s", out)
	}
	if out, _, code := outboxCLI(t, db, "outbox", "status"); code != 0 || !strings.Contains(out, "blocked aggregates: 1") {
		t.Fatalf("status text: %d %s", code, out)
	}

	out, _, code = outboxCLI(t, db, "outbox", "list", "--status", "failed,skipped", "--json")
	var evs []outbox.Event
	if err := json.Unmarshal([]byte(out), &evs); code != 0 || err != nil || len(evs) != 2 || evs[0].ID != 1 || evs[1].ID != 3 {
		t.Fatalf("list --status failed,skipped: %d %v %s", code, err, out)
	}
	out, _, _ = outboxCLI(t, db, "outbox", "list", "--event-type", "entity.*", "--aggregate-id", "11111111-1111-1111-1111-111111111111", "--json")
	if err := json.Unmarshal([]byte(out), &evs); err != nil || len(evs) != 2 {
		t.Fatalf("list by aggregate: %v %s", err, out)
	}
	if _, stderr, code := outboxCLI(t, db, "outbox", "list", "--since", "yesterday-ish"); code == 0 || !strings.Contains(stderr, "RFC 3339") {
		t.Fatalf("bad --since accepted: %d %s", code, stderr)
	}

	// Retry and ack refuse to act on everything unless told.
	for _, cmd := range []string{"retry", "ack"} {
		_, stderr, code := outboxCLI(t, db, "outbox", cmd, "--status", "failed")
		if code == 0 || !strings.Contains(stderr, "no selection") {
			t.Fatalf("outbox %s without a selection: %d %s", cmd, code, stderr)
		}
	}

	// Dry runs change nothing.
	out, _, code = outboxCLI(t, db, "outbox", "retry", "1", "--dry-run", "--json")
	var ch outbox.Change
	if err := json.Unmarshal([]byte(out), &ch); code != 0 || err != nil || !ch.DryRun || ch.Count != 1 {
		t.Fatalf("retry --dry-run: %d %v %s", code, err, out)
	}
	out, _, code = outboxCLI(t, db, "outbox", "ack", "--all", "--dry-run")
	if code != 0 || !strings.Contains(out, "dry run: 2 events would be acknowledged") {
		t.Fatalf("ack --all --dry-run: %d %s", code, out)
	}
	var failed, jobs int
	db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'failed'), (SELECT count(*) FROM aa_job) FROM aa_outbox_event`).Scan(&failed, &jobs)
	if failed != 1 || jobs != 0 {
		t.Fatalf("dry runs changed rows: %d failed, %d jobs", failed, jobs)
	}

	// Retry event 1, then acknowledge the skipped one.
	out, stderr, code = outboxCLI(t, db, "outbox", "retry", "--aggregate-type", "DDM_*", "--by", "ops", "--note", "fixed")
	if code != 0 || !strings.Contains(out, "1 event retried") {
		t.Fatalf("retry: %d %s %s", code, out, stderr)
	}
	var status string
	var attempts int
	db.Pool.QueryRow(ctx, `SELECT status::text, attempts FROM aa_outbox_event WHERE id = 1`).Scan(&status, &attempts)
	if status != "pending" || attempts != 0 {
		t.Fatalf("after retry: %s %d", status, attempts)
	}
	out, stderr, code = outboxCLI(t, db, "outbox", "ack", "--id", "3", "--json")
	if err := json.Unmarshal([]byte(out), &ch); code != 0 || err != nil || ch.Count != 1 || ch.JobID == 0 {
		t.Fatalf("ack: %d %v %s %s", code, err, out, stderr)
	}
	var kinds string
	db.Pool.QueryRow(ctx, `SELECT string_agg(job_kind, ',' ORDER BY id) FROM aa_job`).Scan(&kinds)
	if kinds != "outbox_retry,outbox_ack" {
		t.Fatalf("aa_job kinds %q", kinds)
	}
}

func TestCompactCommand(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	seedOutbox(t, db)
	out, stderr, code := outboxCLI(t, db, "compact", "--dry-run", "--json")
	var res compaction.Result
	if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || !res.DryRun || res.Deleted != 1 {
		t.Fatalf("compact --dry-run: %d %v %s %s", code, err, out, stderr)
	}
	out, stderr, code = outboxCLI(t, db, "compact")
	if code != 0 || !strings.Contains(out, "deleted 1 dispatched events") {
		t.Fatalf("compact: %d %s %s", code, out, stderr)
	}
	// Another run holds the job: the command says so and fails.
	if _, err := db.Pool.Exec(context.Background(), `INSERT INTO aa_job (job_kind, owner) VALUES ('outbox_compact', 'other-host')`); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = outboxCLI(t, db, "compact")
	if code == 0 || !strings.Contains(stderr, "already running") || !strings.Contains(stderr, "other-host") {
		t.Fatalf("compact beside a running one: %d %s", code, stderr)
	}
}
