package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/searchsync/searchsync/compaction"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/lag"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/outbox/outboxadmin"
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
	var rep outboxStatusDoc
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
	var ch outboxadmin.Change
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

// TestOutboxConsumerCommands: list, status, retry and ack for one consumer
// (--consumer) on a search consumer and a webhook that went different ways.
// twoConsumerCLI configures db with two consumers, search (the customer
// example's index, alias returned) and webhook, and returns a runner of
// `searchsync <args>` with that configuration.
func twoConsumerCLI(t *testing.T, db *testenv.DB, prefix string) (func(args ...string) (string, string, int), string) {
	t.Helper()
	alias := testenv.Name(prefix)
	defs, projections := customerIndex(t, alias)
	cfg := writeConfig(t, fmt.Sprintf(`
database: {url: %q, schema: %s}
indexes: {definitions: %q, projections: [%q]}
consumers:
  - {name: search, type: search, search: {indexes: [%s]}}
  - {name: webhook, type: webhook, webhook: {url: "http://127.0.0.1:9/hook", secret: "whsec_c2VjcmV0"}}
routes:
  - {consumer: search, event_types: ["entity.customer.*"]}
  - {consumer: webhook}
`, db.URL, db.Schema, defs, projections, alias))
	return func(args ...string) (string, string, int) {
		t.Helper()
		return runCLI(t, []string{"DATABASE_URL=", "SEARCHSYNC_SCHEMA="}, append([]string{"-c", cfg}, args...)...)
	}, alias
}

func TestOutboxConsumerCommands(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	cli, _ := twoConsumerCLI(t, db, "cons")
	ctx := context.Background()
	// 1: search done, webhook failed. 2: failed for both, no delivery rows. 3: pending role event (webhook only).
	_, err := db.Pool.Exec(ctx, `
INSERT INTO aa_outbox_event (event_type, aggregate_type, aggregate_id, payload, status, attempts, last_error)
VALUES ('entity.customer.updated', 'DDM_ENTITY', '11111111-1111-1111-1111-111111111111', '{}', 'failed', 10, 'webhook: HTTP 422'),
       ('entity.customer.updated', 'DDM_ENTITY', '22222222-2222-2222-2222-222222222222', '{}', 'failed', 10, 'search: HTTP 400'),
       ('role.granted', 'AA_ROLE', NULL, '{}', 'pending', 0, NULL);
INSERT INTO aa_outbox_delivery (event_id, consumer, aggregate_type, aggregate_id, state, attempts, last_error)
VALUES (1, 'search', 'DDM_ENTITY', '11111111-1111-1111-1111-111111111111', 'done', 0, NULL),
       (1, 'webhook', 'DDM_ENTITY', '11111111-1111-1111-1111-111111111111', 'failed', 10, 'HTTP 422 Unprocessable Entity');
INSERT INTO aa_outbox_consumer (consumer, state, paused_at, reason, probes, probe_at)
VALUES ('webhook', 'paused', now() - interval '1 minute', 'connection refused', 2, now() + interval '4 seconds')`)
	if err != nil {
		t.Fatal(err)
	}

	out, stderr, code := cli("outbox", "list", "--consumer", "webhook", "--json")
	var evs []outboxadmin.Listed
	if err := json.Unmarshal([]byte(out), &evs); code != 0 || err != nil || len(evs) != 3 {
		t.Fatalf("list --consumer webhook: %d %v %s %s", code, err, out, stderr)
	}
	if d := evs[0].Delivery("webhook"); d == nil || d.State != "failed" || d.Attempts != 10 || d.Shared || deref(d.LastError) != "HTTP 422 Unprocessable Entity" {
		t.Fatalf("event 1 for webhook: %+v", evs[0].Deliveries)
	}
	if d := evs[1].Delivery("webhook"); d == nil || d.State != "failed" || !d.Shared {
		t.Fatalf("event 2 for webhook: %+v", evs[1].Deliveries)
	}
	out, _, code = cli("outbox", "list", "--consumer", "search")
	if code != 0 || !strings.Contains(out, "SEARCH STATE") || !strings.Contains(out, "failed, shared") || strings.Contains(out, "role.granted") ||
		strings.Count(out, "\n") != 2 {
		t.Fatalf("list --consumer search (text): %d\n%s", code, out)
	}
	out, _, _ = cli("outbox", "list", "--id", "1")
	if !strings.Contains(out, "search=done/0 webhook=failed/10") {
		t.Fatalf("list (text) does not show the delivery rows:\n%s", out)
	}

	out, stderr, code = cli("outbox", "status", "--json")
	var rep outboxStatusDoc
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || len(rep.Consumers) != 2 {
		t.Fatalf("status --json: %d %v %s %s", code, err, out, stderr)
	}
	if s, w := rep.Consumers[0], rep.Consumers[1]; s.Name != "search" || s.Failed != 1 || s.Pending != 0 || s.State != lag.StateNoRelay ||
		w.Name != "webhook" || w.Failed != 2 || w.Pending != 1 || w.State != "paused" || w.Paused == nil || w.Paused.Reason != "connection refused" || w.Paused.Probes != 2 {
		t.Fatalf("status consumers: %+v", rep.Consumers)
	}
	out, _, code = cli("outbox", "status", "--consumer", "webhook")
	if code != 0 || !strings.Contains(out, "connection refused") || strings.Contains(out, "\nsearch ") {
		t.Fatalf("status --consumer webhook (text): %d\n%s", code, out)
	}

	// Refusals: an unknown consumer names the configured ones; a consumer alone is no selection.
	for _, args := range [][]string{
		{"outbox", "list", "--consumer", "crm"},
		{"outbox", "status", "--consumer", "crm"},
		{"outbox", "retry", "--consumer", "crm", "1"},
		{"outbox", "ack", "--consumer", "crm", "--all"},
	} {
		if _, stderr, code := cli(args...); code == 0 || !strings.Contains(stderr, `unknown consumer "crm"; the configured consumers are search, webhook`) {
			t.Errorf("%v: %d %s", args, code, stderr)
		}
	}
	if _, stderr, code := cli("outbox", "ack", "--consumer", "webhook"); code == 0 || !strings.Contains(stderr, "no selection") {
		t.Fatalf("ack --consumer without a selection: %d %s", code, stderr)
	}

	// retry --consumer webhook 1: the webhook row and the event pending, search untouched.
	out, stderr, code = cli("outbox", "retry", "--consumer", "webhook", "1", "--by", "ops")
	if code != 0 || !strings.Contains(out, "1 event retried for webhook") || !strings.Contains(out, "retried for webhook") {
		t.Fatalf("retry --consumer webhook 1: %d %s %s", code, out, stderr)
	}
	var rows, status string
	db.Pool.QueryRow(ctx, `SELECT string_agg(consumer || '=' || state, ' ' ORDER BY consumer), (SELECT status::text FROM aa_outbox_event WHERE id = 1)
FROM aa_outbox_delivery WHERE event_id = 1`).Scan(&rows, &status)
	if rows != "search=done webhook=pending" || status != "pending" {
		t.Fatalf("after retry --consumer webhook: rows %q, event %s", rows, status)
	}

	// ack --consumer webhook 2: search gets a pending row, webhook a done one, the event stays pending.
	out, stderr, code = cli("outbox", "ack", "--consumer", "webhook", "--id", "2", "--json")
	var ch outboxadmin.Change
	if err := json.Unmarshal([]byte(out), &ch); code != 0 || err != nil || ch.Count != 1 || ch.Consumer != "webhook" || ch.JobID == 0 ||
		ch.Events[0].Outcome != "acknowledged for webhook; pending for search" {
		t.Fatalf("ack --consumer webhook 2: %d %v %s %s", code, err, out, stderr)
	}
	db.Pool.QueryRow(ctx, `SELECT string_agg(consumer || '=' || state, ' ' ORDER BY consumer), (SELECT status::text FROM aa_outbox_event WHERE id = 2)
FROM aa_outbox_delivery WHERE event_id = 2`).Scan(&rows, &status)
	if rows != "search=pending webhook=done" || status != "pending" {
		t.Fatalf("after ack --consumer webhook 2: rows %q, event %s", rows, status)
	}
	var kinds, consumers string
	db.Pool.QueryRow(ctx, `SELECT string_agg(job_kind, ',' ORDER BY id), string_agg(params->>'consumer', ',' ORDER BY id) FROM aa_job`).Scan(&kinds, &consumers)
	if kinds != "outbox_retry,outbox_ack" || consumers != "webhook,webhook" {
		t.Fatalf("aa_job: kinds %q consumers %q", kinds, consumers)
	}
}

// TestOutboxSkipCommand: `outbox skip` refuses what it does not take (no
// selection, a pending event, --consumer: pointing at ack --consumer),
// shows a dry run, then skips the failed head, which unblocks its aggregate
// and stays until `outbox ack`.
func TestOutboxSkipCommand(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	seedOutbox(t, db)
	ctx := context.Background()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"outbox", "skip"}, "no selection"},
		{[]string{"outbox", "skip", "2"}, "event 2 is pending"},
		{[]string{"outbox", "skip", "--consumer", "search", "1"}, "ack --consumer search"},
		{[]string{"outbox", "skip", "--status", "skipped", "--all"}, "failed events only"},
	} {
		if _, stderr, code := outboxCLI(t, db, c.args...); code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, %q; want a refusal saying %q", c.args, code, stderr, c.want)
		}
	}
	out, stderr, code := outboxCLI(t, db, "outbox", "skip", "--aggregate-type", "DDM_ENTITY", "--dry-run")
	if code != 0 || !strings.Contains(out, "dry run: 1 event would be skipped") {
		t.Fatalf("skip --dry-run: %d %s %s", code, out, stderr)
	}
	out, stderr, code = outboxCLI(t, db, "outbox", "skip", "1", "--by", "ops@example", "--note", "customer merged", "--json")
	var ch outboxadmin.Change
	if err := json.Unmarshal([]byte(out), &ch); code != 0 || err != nil || ch.Action != "skip" || ch.Count != 1 || ch.JobID == 0 {
		t.Fatalf("skip 1: %d %v %s %s", code, err, out, stderr)
	}
	var status, owner string
	if err := db.Pool.QueryRow(ctx, `SELECT e.status::text, j.owner FROM aa_outbox_event e, aa_job j WHERE e.id = 1 AND j.id = $1 AND j.job_kind = 'outbox_skip'`,
		ch.JobID).Scan(&status, &owner); err != nil || status != "skipped" || owner != "ops@example" {
		t.Fatalf("after skip: event 1 %s, job owner %q (%v)", status, owner, err)
	}
	if out, _, code := outboxCLI(t, db, "outbox", "status"); code != 0 || !strings.Contains(out, "blocked aggregates: 0") {
		t.Fatalf("status after skip: %d %s", code, out)
	}
	if out, stderr, code := outboxCLI(t, db, "outbox", "ack", "1"); code != 0 || !strings.Contains(out, "1 event acknowledged") {
		t.Fatalf("ack of the skipped event: %d %s %s", code, out, stderr)
	}
}

// TestOutboxIndexAndErrorFlags: --index (the projections' kinds, and the
// consumer that alone writes the index) and --error on list, retry and
// skip.
func TestOutboxIndexAndErrorFlags(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	cli, alias := twoConsumerCLI(t, db, "flt")
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `
INSERT INTO aa_outbox_event (event_type, aggregate_type, aggregate_id, payload, status, attempts, last_error)
VALUES ('entity.customer.updated', 'DDM_ENTITY', gen_random_uuid(), '{}', 'failed', 10, 'search: index x/1 v1: engine answered 400 mapper_parsing_exception: bad'),
       ('entity.customer.updated', 'DDM_ENTITY', gen_random_uuid(), '{}', 'failed', 10, 'webhook: HTTP 422 Unprocessable Entity'),
       ('role.granted', 'AA_ROLE', gen_random_uuid(), '{}', 'failed', 3, 'webhook: HTTP 410 Gone')`); err != nil {
		t.Fatal(err)
	}
	list := func(args ...string) []int64 {
		t.Helper()
		out, stderr, code := cli(append([]string{"outbox", "list", "--json"}, args...)...)
		var evs []outboxadmin.Listed
		if err := json.Unmarshal([]byte(out), &evs); code != 0 || err != nil {
			t.Fatalf("list %v: %d %v %s %s", args, code, err, out, stderr)
		}
		ids := []int64{}
		for _, e := range evs {
			ids = append(ids, e.ID)
		}
		return ids
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--index", alias}, "[1 2]"},
		{[]string{"--error", "http 4??"}, "[2 3]"},
		{[]string{"--index", alias, "--error", "MAPPER"}, "[1]"},
		{[]string{"--consumer", "webhook", "--error", "HTTP 4"}, "[2 3]"},
	} {
		if got := fmt.Sprint(list(tc.args...)); got != tc.want {
			t.Errorf("list %v: %s, want %s", tc.args, got, tc.want)
		}
	}
	if _, stderr, code := cli("outbox", "list", "--index", "nope"); code == 0 || !strings.Contains(stderr, `unknown index "nope"`) || !strings.Contains(stderr, alias) {
		t.Errorf("list --index nope: %d %s", code, stderr)
	}
	if _, stderr, code := cli("outbox", "list", "--index", alias, "--consumer", "webhook"); code == 0 || !strings.Contains(stderr, "consumer webhook does not write it (search does)") {
		t.Errorf("list --index with another consumer: %d %s", code, stderr)
	}
	// --error narrows: a retry needs no --all.
	if out, stderr, code := cli("outbox", "retry", "--index", alias, "--error", "mapper_parsing", "--by", "op"); code != 0 ||
		!strings.Contains(out, "1 event retried for search") {
		t.Fatalf("retry --index --error: %d %s %s", code, out, stderr)
	}
	if out, stderr, code := cli("outbox", "skip", "--index", alias, "--error", "HTTP 422", "--by", "op"); code != 0 || !strings.Contains(out, "1 event skipped") {
		t.Fatalf("skip --index --error: %d %s %s", code, out, stderr)
	}
	for id, want := range map[int64]string{1: "pending", 2: "skipped", 3: "failed"} {
		if got := eventStatus(t, db, id); got != want {
			t.Errorf("event %d: %s, want %s", id, got, want)
		}
	}
}

// TestOutboxStatusAgreesWithStatus runs a relay with two webhooks under a
// steady load, one of them refusing some events for good (failed) and
// some for a while (backing off), so that the consumers go different ways;
// then it stops the load and the relay and reads `outbox status --json` and
// `status --json`: every figure they share is the same (one read model), and
// the outbox's own census of pending and failed events agrees with it.
func TestOutboxStatusAgreesWithStatus(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(ok.Close)
	var n atomic.Int64
	picky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) % 17 {
		case 0:
			w.WriteHeader(http.StatusUnprocessableEntity) // parked at once
		case 3, 9:
			w.WriteHeader(http.StatusServiceUnavailable) // retried later
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	t.Cleanup(picky.Close)
	addr := testenv.FreeAddr(t)
	cfg := writeConfig(t, fmt.Sprintf(`
database: {url: %q, schema: %s}
http: {listen: %q}
relay: {poll_interval: 200ms, max_attempts: 3, backoff: {initial: 30s, max: 60s}}
consumers:
  - {name: crm, type: webhook, webhook: {url: %q, secret: s3cret}}
  - {name: billing, type: webhook, webhook: {url: %q, secret: s3cret}}
routes:
  - {consumer: crm}
  - {consumer: billing, event_types: ["entity.customer.*"]}
`, db.URL, db.Schema, addr, ok.URL, picky.URL))
	relayCmd := startRelay(t, cfg, addr)
	stop := steadyLoad(t, db, 150)
	testenv.Eventually(t, 60*time.Second, func() bool { return n.Load() > 400 }, "the load never reached the webhooks")
	stop()
	stopRelay(t, relayCmd)
	// Hold the state still: what backs off would become due between the
	// two reads.
	for _, q := range []string{
		`UPDATE aa_outbox_event SET available_at = now() + interval '1 hour' WHERE status = 'pending' AND available_at > now() AND available_at < '9999-01-01'`,
		`UPDATE aa_outbox_delivery SET available_at = now() + interval '1 hour' WHERE state = 'pending' AND available_at > now() AND available_at < '9999-01-01'`,
	} {
		if _, err := db.Pool.Exec(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}

	env := []string{"DATABASE_URL="}
	out, stderr, code := runCLI(t, env, "-c", cfg, "outbox", "status", "--json", "--blocked", "500")
	var ob outboxStatusDoc
	if err := json.Unmarshal([]byte(out), &ob); code != 0 || err != nil {
		t.Fatalf("outbox status: %d %v %s", code, err, stderr)
	}
	out, stderr, code = runCLI(t, env, "-c", cfg, "status", "--json")
	var st statusDoc
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil {
		t.Fatalf("status: %d %v %s", code, err, stderr)
	}
	s := st.Snapshot
	if ob.BlockedCount != s.BlockedCount || s.BlockedCount == 0 {
		t.Errorf("blocked aggregates: outbox status %d, status %d (want some)", ob.BlockedCount, s.BlockedCount)
	}
	heads := func(bs []lag.Blocked) []string {
		var out []string
		for _, b := range bs {
			out = append(out, fmt.Sprintf("%d/%s/%s/%d", b.HeadID, b.Consumer, b.Cause, b.Waiting))
		}
		return out
	}
	// status lists the oldest 20; outbox status as many as asked.
	if got, want := heads(ob.Blocked), heads(s.Blocked); len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
		t.Errorf("blocked heads: outbox status %v, status %v", got, want)
	}
	if len(ob.Consumers) != len(s.Consumers) {
		t.Fatalf("consumers: %d and %d", len(ob.Consumers), len(s.Consumers))
	}
	var failed int64
	for i, c := range s.Consumers {
		o := ob.Consumers[i]
		if o.Name != c.Name || o.Pending != c.Pending || o.Failed != c.Failed || o.Deliverable != c.Deliverable || o.State != c.State ||
			o.Blocked.Failed.Aggregates != c.Blocked.Failed.Aggregates || o.Blocked.BackingOff.Aggregates != c.Blocked.BackingOff.Aggregates {
			t.Errorf("consumer %s: outbox status %+v, status %+v", c.Name, o, c)
		}
		failed += c.Failed
	}
	if failed == 0 {
		t.Error("no failed event: the test proves nothing about failures")
	}
	// The census counts the table; the read model what is owed: the same
	// pending and failed events, per aggregate type too.
	if ob.ByStatus[outbox.StatusPending] != s.Pending || ob.ByStatus[outbox.StatusFailed] != s.Failed {
		t.Errorf("pending/failed: census %d/%d, read model %d/%d", ob.ByStatus[outbox.StatusPending], ob.ByStatus[outbox.StatusFailed], s.Pending, s.Failed)
	}
	byType := map[string][2]int64{}
	for _, a := range s.AggregateTypes {
		byType[a.AggregateType] = [2]int64{a.Pending, a.Failed}
	}
	for _, tc := range ob.AggregateTypes {
		if got := byType[tc.AggregateType]; (tc.ByStatus[outbox.StatusPending] != 0 || tc.ByStatus[outbox.StatusFailed] != 0 || got != [2]int64{}) &&
			got != [2]int64{tc.ByStatus[outbox.StatusPending], tc.ByStatus[outbox.StatusFailed]} {
			t.Errorf("aggregate type %s: census %v, read model %v", tc.AggregateType, tc.ByStatus, got)
		}
	}
}
