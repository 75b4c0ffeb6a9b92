package outboxadmin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/outbox/outboxadmin"
)

// adminFixture: aggregate A has a failed head (A1 dispatched, A2 failed, A3
// pending), B a head backing off (B1 pending in an hour, B2 and B3 pending),
// C flows (three pending, due), R two skipped role events, and one event
// without an aggregate.
type adminFixture struct {
	db      *testenv.DB
	a, b, c uuid.UUID
	ids     map[string]int64
	admin   *outboxadmin.Admin
}

func newAdminFixture(t *testing.T) *adminFixture {
	t.Helper()
	db := testenv.NewDB(t)
	f := &adminFixture{db: db, a: uuid.New(), b: uuid.New(), c: uuid.New(), ids: map[string]int64{}, admin: outboxadmin.New(db.Schema)}
	w := outbox.NewWriter(outbox.WriterConfig{Schema: db.Schema})
	r := uuid.New()
	type ev struct {
		name, etype, atype string
		agg                *uuid.UUID
	}
	evs := []ev{
		{"A1", "entity.customer.created", "DDM_ENTITY", &f.a},
		{"B1", "entity.customer.created", "DDM_ENTITY", &f.b},
		{"C1", "entity.customer.created", "DDM_ENTITY", &f.c},
		{"A2", "entity.customer.updated", "DDM_ENTITY", &f.a},
		{"B2", "entity.customer.updated", "DDM_ENTITY", &f.b},
		{"R1", "role.granted", "AA_ROLE", &r},
		{"A3", "entity.customer.updated", "DDM_ENTITY", &f.a},
		{"B3", "entity.customer.updated", "DDM_ENTITY", &f.b},
		{"C2", "entity.customer.updated", "DDM_ENTITY", &f.c},
		{"R2", "role.revoked", "AA_ROLE", &r},
		{"N1", "system.ping", "SYSTEM", nil},
		{"C3", "entity.customer.deleted", "DDM_ENTITY", &f.c},
	}
	tx, err := db.Pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		ids, err := w.Write(t.Context(), tx, outbox.Event{EventType: e.etype, AggregateType: e.atype, AggregateID: e.agg, Payload: json.RawMessage(`{"version":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		f.ids[e.name] = ids[0]
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.exec(t, `UPDATE aa_outbox_event SET status = 'dispatched', dispatched_at = now() WHERE id = $1`, f.ids["A1"])
	f.exec(t, `UPDATE aa_outbox_event SET status = 'failed', attempts = 10, last_error = 'hook: HTTP 422 Unprocessable Entity: bad' WHERE id = $1`, f.ids["A2"])
	f.exec(t, `UPDATE aa_outbox_event SET attempts = 2, last_error = 'hook: HTTP 503', available_at = now() + interval '1 hour' WHERE id = $1`, f.ids["B1"])
	f.exec(t, `UPDATE aa_outbox_event SET status = 'skipped' WHERE aggregate_type = 'AA_ROLE'`)
	f.exec(t, `UPDATE aa_outbox_event SET status = 'dispatched', dispatched_at = now() WHERE id = $1`, f.ids["N1"])
	f.exec(t, `UPDATE aa_outbox_event SET created_at = now() - interval '2 hours' WHERE id = $1`, f.ids["C1"])
	return f
}

func (f *adminFixture) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := f.db.Pool.Exec(t.Context(), sql, args...); err != nil {
		t.Fatal(err)
	}
}

// names are the fixture's names of listed or changed events.
func (f *adminFixture) names(evs any) []string {
	var ids []int64
	switch evs := evs.(type) {
	case []outboxadmin.Listed:
		for _, e := range evs {
			ids = append(ids, e.ID)
		}
	case []outboxadmin.ChangedEvent:
		for _, e := range evs {
			ids = append(ids, e.ID)
		}
	default:
		panic(fmt.Sprintf("names of %T", evs))
	}
	var out []string
	for _, id := range ids {
		for n, fid := range f.ids {
			if id == fid {
				out = append(out, n)
			}
		}
	}
	return out
}

func TestAdminStatus(t *testing.T) {
	t.Parallel()
	f := newAdminFixture(t)
	rep, err := f.admin.Status(t.Context(), f.db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	want := map[outbox.Status]int64{"pending": 7, "dispatched": 2, "failed": 1, "skipped": 2}
	if rep.Total != 12 || !maps.Equal(rep.ByStatus, want) {
		t.Fatalf("by status %v (total %d), want %v", rep.ByStatus, rep.Total, want)
	}
	var types []string
	for _, tc := range rep.AggregateTypes {
		types = append(types, tc.AggregateType)
		if tc.AggregateType == "DDM_ENTITY" && (tc.ByStatus["pending"] != 7 || tc.ByStatus["failed"] != 1 || tc.OldestPending == nil) {
			t.Fatalf("DDM_ENTITY counts %+v", tc)
		}
	}
	if !slices.Equal(types, []string{"AA_ROLE", "DDM_ENTITY", "SYSTEM"}) {
		t.Fatalf("aggregate types %v", types)
	}
	if rep.OldestPending == nil || rep.OldestPendingAge < 7000 || rep.OldestPendingAge > 7300 {
		t.Fatalf("oldest pending %v age %.0f s, want about 2 h (C1)", rep.OldestPending, rep.OldestPendingAge)
	}
	// What is blocked is the read model's.
	m := readModel(t, f.db, false, 0)
	if m.BlockedCount != 2 || len(m.Blocked) != 2 {
		t.Fatalf("blocked %d %+v, want A and B", m.BlockedCount, m.Blocked)
	}
	b := m.Blocked[0] // ordered by head id: B1 < A2
	if b.AggregateID != f.b || b.HeadID != f.ids["B1"] || b.Status != "pending" || b.Waiting != 2 || b.LastError != "hook: HTTP 503" {
		t.Fatalf("blocked B: %+v", b)
	}
	a := m.Blocked[1]
	if a.AggregateID != f.a || a.HeadID != f.ids["A2"] || a.Status != "failed" || a.Waiting != 1 ||
		!strings.Contains(a.LastError, "422") || a.EventType != "entity.customer.updated" {
		t.Fatalf("blocked A: %+v", a)
	}
	// The bound on listed aggregates keeps the count.
	if m := readModel(t, f.db, false, 1); len(m.Blocked) != 1 || m.BlockedCount != 2 {
		t.Fatalf("status with 1 listed: %+v", m)
	}
}

func TestAdminList(t *testing.T) {
	t.Parallel()
	f := newAdminFixture(t)
	for _, tc := range []struct {
		name   string
		filter outboxadmin.Filter
		want   []string
	}{
		{"failed", outboxadmin.Filter{Statuses: []outbox.Status{"failed"}}, []string{"A2"}},
		{"failed or skipped", outboxadmin.Filter{Statuses: []outbox.Status{"failed", "skipped"}}, []string{"A2", "R1", "R2"}},
		{"event type pattern", outboxadmin.Filter{EventType: "entity.customer.cr*"}, []string{"A1", "B1", "C1"}},
		{"event type ?", outboxadmin.Filter{EventType: "role.r?v*"}, []string{"R2"}},
		{"aggregate type with underscore", outboxadmin.Filter{AggregateType: "AA_ROLE"}, []string{"R1", "R2"}},
		{"underscore is literal", outboxadmin.Filter{AggregateType: "AAXROLE"}, nil},
		{"aggregate", outboxadmin.Filter{AggregateID: &f.a}, []string{"A1", "A2", "A3"}},
		{"aggregate and status", outboxadmin.Filter{AggregateID: &f.b, Statuses: []outbox.Status{"pending"}}, []string{"B1", "B2", "B3"}},
		{"ids", outboxadmin.Filter{IDs: []int64{f.ids["C3"], f.ids["N1"]}}, []string{"N1", "C3"}},
		{"until", outboxadmin.Filter{Until: time.Now().Add(-time.Hour)}, []string{"C1"}},
		{"since", outboxadmin.Filter{Since: time.Now().Add(-time.Hour), AggregateID: &f.c}, []string{"C2", "C3"}},
		{"limit", outboxadmin.Filter{Limit: 2}, []string{"A1", "B1"}},
	} {
		evs, err := f.admin.List(t.Context(), f.db.Pool, tc.filter)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := f.names(evs); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	evs, _ := f.admin.List(t.Context(), f.db.Pool, outboxadmin.Filter{IDs: []int64{f.ids["A2"]}})
	if e := evs[0]; e.Status != "failed" || e.Attempts != 10 || string(e.Payload) != `{"version": 1}` || e.AggregateID == nil || *e.AggregateID != f.a {
		t.Fatalf("listed event %+v", e)
	}
}

func TestAdminRetry(t *testing.T) {
	t.Parallel()
	f := newAdminFixture(t)
	ctx := t.Context()
	if _, err := f.admin.Retry(ctx, f.db.Pool, outboxadmin.Filter{}, outboxadmin.ChangeOptions{By: "op"}); !errors.Is(err, outboxadmin.ErrNoSelection) {
		t.Fatalf("retry without a selection: %v, want ErrNoSelection", err)
	}
	if _, err := f.admin.Retry(ctx, f.db.Pool, outboxadmin.Filter{Statuses: []outbox.Status{"failed"}, Limit: 5}, outboxadmin.ChangeOptions{By: "op"}); !errors.Is(err, outboxadmin.ErrNoSelection) {
		t.Fatalf("retry with only status and limit: %v, want ErrNoSelection", err)
	}
	if _, err := f.admin.Retry(ctx, f.db.Pool, outboxadmin.Filter{AggregateID: &f.a, Statuses: []outbox.Status{"skipped"}}, outboxadmin.ChangeOptions{By: "op"}); err == nil {
		t.Fatal("retry of skipped events was accepted")
	}

	// Dry run: reports A2 only (the pending events of A are not failed), changes nothing.
	ch, err := f.admin.Retry(ctx, f.db.Pool, outboxadmin.Filter{AggregateID: &f.a}, outboxadmin.ChangeOptions{DryRun: true})
	if err != nil || ch.Count != 1 || ch.Events[0].ID != f.ids["A2"] || ch.JobID != 0 {
		t.Fatalf("dry run: %+v, %v", ch, err)
	}
	// It shows the event as it is and says what would happen to it.
	if e := ch.Events[0]; e.Status != outbox.StatusFailed || e.Attempts != 10 || e.Outcome != "would be retried" {
		t.Errorf("dry run answers %s, %d attempts, %q; want failed, 10, \"would be retried\"", e.Status, e.Attempts, e.Outcome)
	}
	var status string
	var attempts int
	f.db.Pool.QueryRow(ctx, `SELECT status::text, attempts FROM aa_outbox_event WHERE id = $1`, f.ids["A2"]).Scan(&status, &attempts)
	if status != "failed" || attempts != 10 || countJobs(t, f.db, "") != 0 {
		t.Fatalf("dry run changed A2: %s %d", status, attempts)
	}

	// The relays are woken.
	conn, err := pgx.Connect(ctx, f.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{outbox.Channel(f.db.Schema)}.Sanitize()); err != nil {
		t.Fatal(err)
	}

	ch, err = f.admin.Retry(ctx, f.db.Pool, outboxadmin.Filter{AggregateID: &f.a}, outboxadmin.ChangeOptions{By: "alice@host", Note: "endpoint fixed"})
	if err != nil || ch.Count != 1 || ch.JobID == 0 {
		t.Fatalf("retry: %+v, %v", ch, err)
	}
	var availableIn float64
	var lastError *string
	f.db.Pool.QueryRow(ctx, `SELECT status::text, attempts, extract(epoch FROM available_at - now()), last_error FROM aa_outbox_event WHERE id = $1`,
		f.ids["A2"]).Scan(&status, &attempts, &availableIn, &lastError)
	if status != "pending" || attempts != 0 || availableIn > 0 || lastError == nil || !strings.Contains(*lastError, "422") {
		t.Fatalf("after retry A2 is %s, attempts %d, available in %.1fs, last_error %v", status, attempts, availableIn, lastError)
	}
	nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := conn.WaitForNotification(nctx); err != nil {
		t.Fatalf("no NOTIFY after retry: %v", err)
	}
	// A is no longer blocked.
	if m := readModel(t, f.db, false, 0); m.BlockedCount != 1 || m.Blocked[0].AggregateID != f.b {
		t.Fatalf("blocked after retry: %+v", m.Blocked)
	}
	// The retry is recorded.
	var owner string
	var result []byte
	f.db.Pool.QueryRow(ctx, `SELECT owner, result FROM aa_job WHERE id = $1 AND job_kind = 'outbox_retry' AND state = 'succeeded'`, ch.JobID).Scan(&owner, &result)
	if owner != "alice@host" || !strings.Contains(string(result), `"note": "endpoint fixed"`) {
		t.Fatalf("retry job: owner %q result %s", owner, result)
	}
	// Nothing left to retry.
	ch, err = f.admin.Retry(ctx, f.db.Pool, outboxadmin.Filter{}, outboxadmin.ChangeOptions{All: true, By: "op"})
	if err != nil || ch.Count != 0 || ch.JobID != 0 {
		t.Fatalf("retry --all with nothing failed: %+v, %v", ch, err)
	}
}

func TestAdminAck(t *testing.T) {
	t.Parallel()
	f := newAdminFixture(t)
	ctx := t.Context()
	if _, err := f.admin.Ack(ctx, f.db.Pool, outboxadmin.Filter{Statuses: []outbox.Status{"skipped"}}, outboxadmin.ChangeOptions{By: "op"}); !errors.Is(err, outboxadmin.ErrNoSelection) {
		t.Fatalf("ack without a selection: %v, want ErrNoSelection", err)
	}
	if _, err := f.admin.Ack(ctx, f.db.Pool, outboxadmin.Filter{AggregateID: &f.a, Statuses: []outbox.Status{"pending"}}, outboxadmin.ChangeOptions{By: "op"}); err == nil {
		t.Fatal("ack of pending events was accepted")
	}
	if _, err := f.admin.Ack(ctx, f.db.Pool, outboxadmin.Filter{AggregateID: &f.a}, outboxadmin.ChangeOptions{}); err == nil {
		t.Fatal("ack without By was accepted")
	}

	// Ids of every kind: only the failed and skipped ones are acknowledged.
	sel := outboxadmin.Filter{IDs: []int64{f.ids["A1"], f.ids["A2"], f.ids["A3"], f.ids["R1"], f.ids["B1"]}}
	dry, err := f.admin.Ack(ctx, f.db.Pool, sel, outboxadmin.ChangeOptions{DryRun: true})
	if err != nil || !slices.Equal(f.names(dry.Events), []string{"A2", "R1"}) {
		t.Fatalf("dry run: %+v, %v", dry, err)
	}
	if n := countEvents(t, f.db); n != 12 {
		t.Fatalf("dry run deleted rows: %d left", n)
	}

	ch, err := f.admin.Ack(ctx, f.db.Pool, sel, outboxadmin.ChangeOptions{By: "bob@host", Note: "customer deleted upstream"})
	if err != nil || ch.Count != 2 || ch.JobID == 0 {
		t.Fatalf("ack: %+v, %v", ch, err)
	}
	if n := countEvents(t, f.db); n != 10 {
		t.Fatalf("%d rows after acknowledging 2 of 12", n)
	}
	var state, owner string
	var result []byte
	if err := f.db.Pool.QueryRow(ctx, `SELECT state, owner, result FROM aa_job WHERE id = $1 AND job_kind = 'outbox_ack'`, ch.JobID).Scan(&state, &owner, &result); err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Count      int            `json:"count"`
		By         string         `json:"by"`
		DBUser     string         `json:"db_user"`
		IDs        []int64        `json:"ids"`
		EventTypes map[string]int `json:"event_types"`
		Note       string         `json:"note"`
		Events     []struct {
			ID        int64   `json:"id"`
			Status    string  `json:"status"`
			LastError *string `json:"last_error"`
		} `json:"events"`
	}
	if err := json.Unmarshal(result, &rec); err != nil {
		t.Fatal(err)
	}
	if state != "succeeded" || owner != "bob@host" || rec.Count != 2 || rec.By != "bob@host" || rec.DBUser == "" ||
		!slices.Equal(rec.IDs, []int64{f.ids["A2"], f.ids["R1"]}) || rec.EventTypes["role.granted"] != 1 ||
		rec.Note != "customer deleted upstream" || len(rec.Events) != 2 || rec.Events[0].Status != "failed" ||
		rec.Events[0].LastError == nil || !strings.Contains(*rec.Events[0].LastError, "422") {
		t.Fatalf("ack job: %s %s %s", state, owner, result)
	}
	// The failed head is gone: A is no longer blocked, A3 is its head now.
	rep, _ := f.admin.Status(ctx, f.db.Pool)
	if m := readModel(t, f.db, false, 0); m.BlockedCount != 1 || m.Blocked[0].AggregateID != f.b || rep.ByStatus["failed"] != 0 || rep.ByStatus["skipped"] != 1 {
		t.Fatalf("after ack: %+v %+v", rep, m.Blocked)
	}

	// --all acknowledges every remaining skipped event.
	ch, err = f.admin.Ack(ctx, f.db.Pool, outboxadmin.Filter{Statuses: []outbox.Status{"skipped"}}, outboxadmin.ChangeOptions{All: true, By: "op"})
	if err != nil || ch.Count != 1 || ch.Events[0].ID != f.ids["R2"] {
		t.Fatalf("ack --all skipped: %+v, %v", ch, err)
	}
	if countJobs(t, f.db, outboxadmin.JobKindAck) != 2 {
		t.Fatal("want one aa_job row per acknowledgement")
	}
}

func countEvents(t *testing.T, db *testenv.DB) int {
	var n int
	if err := db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM aa_outbox_event`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func countJobs(t *testing.T, db *testenv.DB, kind string) int {
	var n int
	if err := db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM aa_job WHERE $1 = '' OR job_kind = $1`, kind).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
