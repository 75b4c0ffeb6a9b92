package outboxadmin_test

import (
	"context"
	"encoding/json"
	"errors"
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
	"github.com/searchsync/searchsync/routing"
)

// consumerFixture routes entity.customer.* to search and webhook, role.* to
// webhook only. Events:
//
//	S1  split: search done, webhook failed (10 attempts); outbox failed
//	S2  split: search pending (2 attempts, due in an hour), webhook failed; outbox pending
//	S3  split: search failed, webhook done; outbox failed
//	U1  no delivery rows, failed (entity: search and webhook)
//	U2  no delivery rows, failed (role: webhook only)
//	P1  no delivery rows, pending (entity)
//	P2  no delivery rows, pending (role)
//	D1  dispatched
type consumerFixture struct {
	db    *testenv.DB
	ids   map[string]int64
	admin *outboxadmin.Admin
}

var testRouting = &routing.Table{
	Consumers: []string{"search", "webhook"},
	Routes:    []routing.Route{{Consumer: "search", EventTypes: []string{"entity.customer.*"}}, {Consumer: "webhook"}},
}

func newConsumerFixture(t *testing.T) *consumerFixture {
	t.Helper()
	db := testenv.NewDB(t)
	f := &consumerFixture{db: db, ids: map[string]int64{}, admin: outboxadmin.New(db.Schema).WithRouting(testRouting)}
	w := outbox.NewWriter(outbox.WriterConfig{Schema: db.Schema})
	tx, err := db.Pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []struct{ name, etype, atype string }{
		{"S1", "entity.customer.updated", "DDM_ENTITY"},
		{"S2", "entity.customer.updated", "DDM_ENTITY"},
		{"S3", "entity.customer.updated", "DDM_ENTITY"},
		{"U1", "entity.customer.updated", "DDM_ENTITY"},
		{"U2", "role.granted", "AA_ROLE"},
		{"P1", "entity.customer.created", "DDM_ENTITY"},
		{"P2", "role.revoked", "AA_ROLE"},
		{"D1", "entity.customer.created", "DDM_ENTITY"},
	} {
		agg := uuid.New()
		ids, err := w.Write(t.Context(), tx, outbox.Event{EventType: e.etype, AggregateType: e.atype, AggregateID: &agg, Payload: json.RawMessage(`{"version":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		f.ids[e.name] = ids[0]
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.exec(t, `UPDATE aa_outbox_event SET status = 'failed', attempts = 10, last_error = 'webhook: HTTP 422 Unprocessable Entity' WHERE id = $1`, f.ids["S1"])
	f.exec(t, `UPDATE aa_outbox_event SET attempts = 10, last_error = 'webhook: HTTP 422', available_at = now() + interval '1 hour' WHERE id = $1`, f.ids["S2"])
	f.exec(t, `UPDATE aa_outbox_event SET status = 'failed', attempts = 1, last_error = 'search: mapper_parsing_exception' WHERE id = $1`, f.ids["S3"])
	f.exec(t, `UPDATE aa_outbox_event SET status = 'failed', attempts = 10, last_error = 'search: HTTP 400' WHERE id = $1`, f.ids["U1"])
	f.exec(t, `UPDATE aa_outbox_event SET status = 'failed', attempts = 3, last_error = 'webhook: HTTP 410' WHERE id = $1`, f.ids["U2"])
	f.exec(t, `UPDATE aa_outbox_event SET status = 'dispatched', dispatched_at = now() WHERE id = $1`, f.ids["D1"])
	row := func(ev, consumer, state string, attempts int, lastError *string, availableIn time.Duration) {
		f.exec(t, `
INSERT INTO aa_outbox_delivery (event_id, consumer, aggregate_type, aggregate_id, state, attempts, last_error, available_at, delivered_at)
SELECT id, $2, aggregate_type, aggregate_id, $3, $4, $5, now() + $6::interval, CASE WHEN $3 = 'done' THEN now() END
FROM aa_outbox_event WHERE id = $1`, f.ids[ev], consumer, state, attempts, lastError, availableIn.String())
	}
	e422, e503, emap := "HTTP 422 Unprocessable Entity", "HTTP 503", "mapper_parsing_exception"
	row("S1", "search", "done", 0, nil, 0)
	row("S1", "webhook", "failed", 10, &e422, 0)
	row("S2", "search", "pending", 2, &e503, time.Hour)
	row("S2", "webhook", "failed", 10, &e422, 0)
	row("S3", "search", "failed", 1, &emap, 0)
	row("S3", "webhook", "done", 0, nil, 0)
	return f
}

func (f *consumerFixture) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := f.db.Pool.Exec(t.Context(), sql, args...); err != nil {
		t.Fatal(err)
	}
}

func (f *consumerFixture) names(ids []int64) []string {
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

func listedIDs(evs []outboxadmin.Listed) []int64 {
	var out []int64
	for _, e := range evs {
		out = append(out, e.ID)
	}
	return out
}

func changedIDs(evs []outboxadmin.ChangedEvent) []int64 {
	var out []int64
	for _, e := range evs {
		out = append(out, e.ID)
	}
	return out
}

// eventRow is an outbox row as the test reads it; status "" when gone.
type eventRow struct {
	status      string
	attempts    int
	lastError   *string
	availableIn float64 // seconds from now
}

func (f *consumerFixture) event(t *testing.T, name string) eventRow {
	t.Helper()
	var r eventRow
	err := f.db.Pool.QueryRow(t.Context(), `SELECT status::text, attempts, last_error, extract(epoch FROM available_at - now())::float8
FROM aa_outbox_event WHERE id = $1`, f.ids[name]).Scan(&r.status, &r.attempts, &r.lastError, &r.availableIn)
	if errors.Is(err, pgx.ErrNoRows) {
		return eventRow{}
	}
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// deliveries are the delivery rows of an event: consumer → "state/attempts".
func (f *consumerFixture) deliveries(t *testing.T, name string) map[string]string {
	t.Helper()
	rows, err := f.db.Pool.Query(t.Context(), `SELECT consumer, state || '/' || attempts FROM aa_outbox_delivery WHERE event_id = $1`, f.ids[name])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var c, s string
	if _, err := pgx.ForEachRow(rows, []any{&c, &s}, func() error { out[c] = s; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func (f *consumerFixture) deliveryAvailableIn(t *testing.T, name, consumer string) float64 {
	t.Helper()
	var s float64
	if err := f.db.Pool.QueryRow(t.Context(), `SELECT extract(epoch FROM available_at - now())::float8 FROM aa_outbox_delivery WHERE event_id = $1 AND consumer = $2`,
		f.ids[name], consumer).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAdminListConsumer(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name   string
		filter outboxadmin.Filter
		want   []string
	}{
		{"webhook owes", outboxadmin.Filter{Consumer: "webhook"}, []string{"S1", "S2", "U1", "U2", "P1", "P2"}},
		{"search owes", outboxadmin.Filter{Consumer: "search"}, []string{"S2", "S3", "U1", "P1"}},
		{"webhook parked", outboxadmin.Filter{Consumer: "webhook", Statuses: []outbox.Status{"failed"}}, []string{"S1", "S2", "U1", "U2"}},
		{"search parked", outboxadmin.Filter{Consumer: "search", Statuses: []outbox.Status{"failed"}}, []string{"S3", "U1"}},
		{"search pending", outboxadmin.Filter{Consumer: "search", Statuses: []outbox.Status{"pending"}}, []string{"S2", "P1"}},
		{"webhook, role events", outboxadmin.Filter{Consumer: "webhook", AggregateType: "AA_ROLE"}, []string{"U2", "P2"}},
		{"webhook, limit", outboxadmin.Filter{Consumer: "webhook", Limit: 2}, []string{"S1", "S2"}},
		{"webhook, ids", outboxadmin.Filter{Consumer: "webhook", IDs: []int64{f.ids["S3"], f.ids["U1"], f.ids["D1"]}}, []string{"U1"}},
	} {
		evs, err := f.admin.List(ctx, f.db.Pool, tc.filter)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := f.names(listedIDs(evs)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}

	// Per-consumer state: its own row, or the outbox row's (shared).
	evs, err := f.admin.List(ctx, f.db.Pool, outboxadmin.Filter{Consumer: "webhook", IDs: []int64{f.ids["S1"], f.ids["U1"]}})
	if err != nil || len(evs) != 2 {
		t.Fatalf("list: %v %v", evs, err)
	}
	s1, u1 := evs[0], evs[1]
	if d := s1.Delivery("webhook"); d == nil || d.State != "failed" || d.Attempts != 10 || d.Shared || d.LastError == nil || *d.LastError != "HTTP 422 Unprocessable Entity" {
		t.Fatalf("S1 webhook: %+v", d)
	}
	if d := s1.Delivery("search"); d == nil || d.State != "done" || d.DeliveredAt == nil {
		t.Fatalf("S1 search: %+v", d)
	}
	if d := u1.Delivery("webhook"); len(u1.Deliveries) != 1 || d == nil || d.State != "failed" || !d.Shared || d.Attempts != 10 || *d.LastError != "search: HTTP 400" {
		t.Fatalf("U1 webhook: %+v", u1.Deliveries)
	}
	// JSON: the event's columns and its deliveries.
	b, _ := json.Marshal(s1)
	if !strings.Contains(string(b), `"event_type":"entity.customer.updated"`) || !strings.Contains(string(b), `"deliveries":[{"consumer":"search","state":"done"`) {
		t.Fatalf("JSON of a listed event: %s", b)
	}
	// Without a consumer the delivery rows of split events are listed too.
	evs, _ = f.admin.List(ctx, f.db.Pool, outboxadmin.Filter{IDs: []int64{f.ids["S2"], f.ids["P1"]}})
	if len(evs) != 2 || len(evs[0].Deliveries) != 2 || evs[0].Delivery("search").State != "pending" || len(evs[1].Deliveries) != 0 {
		t.Fatalf("list without a consumer: %+v", evs)
	}
}

func TestAdminConsumerRefusals(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	ctx := t.Context()
	opts := outboxadmin.ChangeOptions{By: "op"}
	sel := outboxadmin.Filter{Consumer: "crm-hook", IDs: []int64{f.ids["S1"]}}
	for name, call := range map[string]func() error{
		"list":  func() error { _, err := f.admin.List(ctx, f.db.Pool, sel); return err },
		"retry": func() error { _, err := f.admin.Retry(ctx, f.db.Pool, sel, opts); return err },
		"ack":   func() error { _, err := f.admin.Ack(ctx, f.db.Pool, sel, opts); return err },
	} {
		err := call()
		var uc *outboxadmin.UnknownConsumerError
		if !errors.As(err, &uc) || uc.Name != "crm-hook" || !strings.Contains(err.Error(), `unknown consumer "crm-hook"; the configured consumers are search, webhook`) {
			t.Errorf("%s for an unknown consumer: %v", name, err)
		}
	}
	// A consumer alone is no selection.
	for name, call := range map[string]func() error{
		"retry": func() error {
			_, err := f.admin.Retry(ctx, f.db.Pool, outboxadmin.Filter{Consumer: "webhook", Statuses: []outbox.Status{"failed"}}, opts)
			return err
		},
		"ack": func() error {
			_, err := f.admin.Ack(ctx, f.db.Pool, outboxadmin.Filter{Consumer: "webhook"}, opts)
			return err
		},
	} {
		if err := call(); !errors.Is(err, outboxadmin.ErrNoSelection) {
			t.Errorf("%s --consumer without a selection: %v, want ErrNoSelection", name, err)
		}
	}
	if _, err := f.admin.List(ctx, f.db.Pool, outboxadmin.Filter{Consumer: "webhook", Statuses: []outbox.Status{"dispatched"}}); err == nil || !strings.Contains(err.Error(), "pending, failed") {
		t.Errorf("list --consumer --status dispatched: %v", err)
	}
	if _, err := f.admin.Ack(ctx, f.db.Pool, outboxadmin.Filter{Consumer: "webhook", Statuses: []outbox.Status{"skipped"}, IDs: []int64{1}}, opts); err == nil {
		t.Error("ack --consumer --status skipped was accepted")
	}
	// Without routing the admin cannot know what a consumer owes.
	if _, err := outboxadmin.New(f.db.Schema).List(ctx, f.db.Pool, outboxadmin.Filter{Consumer: "webhook"}); err == nil || !strings.Contains(err.Error(), "WithRouting") {
		t.Errorf("list --consumer without routing: %v", err)
	}
	// Nothing changed, nothing recorded.
	if n := countJobs(t, f.db, ""); n != 0 {
		t.Fatalf("%d aa_job rows after refusals", n)
	}
	if r := f.event(t, "S1"); r.status != "failed" {
		t.Fatalf("S1 after refusals: %+v", r)
	}
}

func TestAdminRetryConsumer(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, f.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{outbox.Channel(f.db.Schema)}.Sanitize()); err != nil {
		t.Fatal(err)
	}

	// Dry run: S1, S2 (webhook rows), U1, U2 (failed, routed to webhook).
	dry, err := f.admin.Retry(ctx, f.db.Pool, outboxadmin.Filter{Consumer: "webhook"}, outboxadmin.ChangeOptions{All: true, DryRun: true})
	if err != nil || !slices.Equal(f.names(changedIDs(dry.Events)), []string{"S1", "S2", "U1", "U2"}) || dry.Consumer != "webhook" {
		t.Fatalf("dry run: %+v, %v", dry, err)
	}
	if d := f.deliveries(t, "S1"); d["webhook"] != "failed/10" {
		t.Fatalf("dry run changed S1: %v", d)
	}

	// S1: search done, webhook failed → webhook pending, event pending; search untouched.
	ch, err := f.admin.Retry(ctx, f.db.Pool, outboxadmin.Filter{Consumer: "webhook", IDs: []int64{f.ids["S1"]}}, outboxadmin.ChangeOptions{By: "alice", Note: "endpoint fixed"})
	if err != nil || ch.Count != 1 || ch.JobID == 0 || ch.Events[0].Outcome != "retried for webhook" || ch.Events[0].Status != "pending" {
		t.Fatalf("retry --consumer webhook S1: %+v, %v", ch, err)
	}
	if d := f.deliveries(t, "S1"); d["webhook"] != "pending/0" || d["search"] != "done/0" {
		t.Fatalf("S1 rows after retry: %v", d)
	}
	if in := f.deliveryAvailableIn(t, "S1", "webhook"); in > 0 {
		t.Fatalf("S1 webhook available in %.1fs", in)
	}
	if r := f.event(t, "S1"); r.status != "pending" || r.availableIn > 0 || r.lastError == nil {
		t.Fatalf("S1 after retry: %+v", r)
	}
	nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := conn.WaitForNotification(nctx); err != nil {
		t.Fatalf("no NOTIFY after retry: %v", err)
	}
	var owner string
	var params, result []byte
	f.db.Pool.QueryRow(ctx, `SELECT owner, params, result FROM aa_job WHERE id = $1 AND job_kind = 'outbox_retry'`, ch.JobID).Scan(&owner, &params, &result)
	if owner != "alice" || !strings.Contains(string(params), `"consumer": "webhook"`) || !strings.Contains(string(result), `"consumer": "webhook"`) ||
		!strings.Contains(string(result), `"outcome": "retried for webhook"`) || !strings.Contains(string(result), `"note": "endpoint fixed"`) {
		t.Fatalf("retry job: %s %s %s", owner, params, result)
	}

	// S2: search pending in an hour, webhook failed → webhook pending now, the event due now.
	if _, err := f.admin.Retry(ctx, f.db.Pool, outboxadmin.Filter{Consumer: "webhook", IDs: []int64{f.ids["S2"]}}, outboxadmin.ChangeOptions{By: "op"}); err != nil {
		t.Fatal(err)
	}
	if d := f.deliveries(t, "S2"); d["webhook"] != "pending/0" || d["search"] != "pending/2" {
		t.Fatalf("S2 rows after retry: %v", d)
	}
	if in := f.deliveryAvailableIn(t, "S2", "search"); in < 3000 {
		t.Fatalf("the search row of S2 moved: available in %.0fs", in)
	}
	if r := f.event(t, "S2"); r.status != "pending" || r.availableIn > 0 || r.attempts != 2 {
		t.Fatalf("S2 after retry: %+v", r)
	}

	// U1 (no rows, failed, routed to search and webhook): retried whole, no rows written.
	ch, err = f.admin.Retry(ctx, f.db.Pool, outboxadmin.Filter{Consumer: "search", IDs: []int64{f.ids["U1"], f.ids["U2"]}}, outboxadmin.ChangeOptions{By: "op"})
	if err != nil || !slices.Equal(f.names(changedIDs(ch.Events)), []string{"U1"}) || ch.Events[0].Outcome != "retried" {
		t.Fatalf("retry --consumer search U1 U2: %+v, %v", ch, err)
	}
	if r := f.event(t, "U1"); r.status != "pending" || r.attempts != 0 || len(f.deliveries(t, "U1")) != 0 {
		t.Fatalf("U1 after retry: %+v %v", r, f.deliveries(t, "U1"))
	}
	if r := f.event(t, "U2"); r.status != "failed" {
		t.Fatalf("U2 (not routed to search) changed: %+v", r)
	}

	// Search does not owe S1 any more (done): nothing to retry for it.
	ch, err = f.admin.Retry(ctx, f.db.Pool, outboxadmin.Filter{Consumer: "search", IDs: []int64{f.ids["S1"]}}, outboxadmin.ChangeOptions{By: "op"})
	if err != nil || ch.Count != 0 || ch.JobID != 0 {
		t.Fatalf("retry --consumer search S1: %+v, %v", ch, err)
	}
}

func TestAdminRetryAllConsumers(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	ctx := t.Context()
	// Unqualified: the failed events and every failed delivery row of the
	// selection (S2's outbox row is pending, its webhook row failed).
	ch, err := f.admin.Retry(ctx, f.db.Pool, outboxadmin.Filter{}, outboxadmin.ChangeOptions{All: true, By: "op"})
	if err != nil || !slices.Equal(f.names(changedIDs(ch.Events)), []string{"S1", "S2", "S3", "U1", "U2"}) {
		t.Fatalf("retry --all: %+v, %v", ch, err)
	}
	for name, want := range map[string]map[string]string{
		"S1": {"search": "done/0", "webhook": "pending/0"},
		"S2": {"search": "pending/2", "webhook": "pending/0"},
		"S3": {"search": "pending/0", "webhook": "done/0"},
	} {
		if d := f.deliveries(t, name); !maps.Equal(d, want) {
			t.Errorf("%s rows after retry --all: %v, want %v", name, d, want)
		}
		if r := f.event(t, name); r.status != "pending" || r.availableIn > 0 {
			t.Errorf("%s after retry --all: %+v", name, r)
		}
	}
	if r := f.event(t, "U2"); r.status != "pending" || r.attempts != 0 {
		t.Fatalf("U2 after retry --all: %+v", r)
	}
}

func TestAdminAckConsumer(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	ctx := t.Context()

	// S1: search done, webhook failed → acknowledged for webhook, the event is finished: gone.
	ch, err := f.admin.Ack(ctx, f.db.Pool, outboxadmin.Filter{Consumer: "webhook", IDs: []int64{f.ids["S1"]}}, outboxadmin.ChangeOptions{By: "bob", Note: "endpoint retired"})
	if err != nil || ch.Count != 1 || ch.JobID == 0 || !ch.Events[0].Deleted {
		t.Fatalf("ack --consumer webhook S1: %+v, %v", ch, err)
	}
	if r := f.event(t, "S1"); r.status != "" || len(f.deliveries(t, "S1")) != 0 {
		t.Fatalf("S1 after ack: %+v %v", r, f.deliveries(t, "S1"))
	}
	var owner string
	var params, result []byte
	f.db.Pool.QueryRow(ctx, `SELECT owner, params, result FROM aa_job WHERE id = $1 AND job_kind = 'outbox_ack' AND state = 'succeeded'`, ch.JobID).Scan(&owner, &params, &result)
	if owner != "bob" || !strings.Contains(string(params), `"consumer": "webhook"`) || !strings.Contains(string(result), `"last_error": "HTTP 422 Unprocessable Entity"`) ||
		!strings.Contains(string(result), `deleted (every other consumer has it)`) {
		t.Fatalf("ack job: %s %s %s", owner, params, result)
	}

	// U1: failed without rows, routed to search and webhook → search pending, webhook done, event pending.
	ch, err = f.admin.Ack(ctx, f.db.Pool, outboxadmin.Filter{Consumer: "webhook", IDs: []int64{f.ids["U1"]}}, outboxadmin.ChangeOptions{By: "bob"})
	if err != nil || ch.Count != 1 || ch.Events[0].Deleted || ch.Events[0].Outcome != "acknowledged for webhook; pending for search" {
		t.Fatalf("ack --consumer webhook U1: %+v, %v", ch, err)
	}
	if d := f.deliveries(t, "U1"); !maps.Equal(d, map[string]string{"search": "pending/0", "webhook": "done/10"}) {
		t.Fatalf("U1 rows after ack: %v", d)
	}
	var webhookErr *string
	f.db.Pool.QueryRow(ctx, `SELECT last_error FROM aa_outbox_delivery WHERE event_id = $1 AND consumer = 'webhook'`, f.ids["U1"]).Scan(&webhookErr)
	if webhookErr == nil || *webhookErr != "search: HTTP 400" {
		t.Fatalf("U1 webhook row keeps no last_error: %v", webhookErr)
	}
	if r := f.event(t, "U1"); r.status != "pending" || r.availableIn > 0 {
		t.Fatalf("U1 after ack: %+v", r)
	}
	if in := f.deliveryAvailableIn(t, "U1", "search"); in > 0 {
		t.Fatalf("U1 search row available in %.1fs", in)
	}
	// Search now owes U1; webhook does not.
	evs, _ := f.admin.List(ctx, f.db.Pool, outboxadmin.Filter{Consumer: "search", IDs: []int64{f.ids["U1"]}})
	if len(evs) != 1 || evs[0].Delivery("search").State != "pending" || evs[0].Delivery("search").Shared {
		t.Fatalf("search's U1 after the ack: %+v", evs)
	}
	if evs, _ := f.admin.List(ctx, f.db.Pool, outboxadmin.Filter{Consumer: "webhook", IDs: []int64{f.ids["U1"]}}); len(evs) != 0 {
		t.Fatalf("webhook still owes U1: %+v", evs)
	}

	// S2: webhook failed, search still pending → webhook done, the event stays pending with search's schedule.
	ch, err = f.admin.Ack(ctx, f.db.Pool, outboxadmin.Filter{Consumer: "webhook", IDs: []int64{f.ids["S2"]}}, outboxadmin.ChangeOptions{By: "bob"})
	if err != nil || ch.Count != 1 || ch.Events[0].Deleted || ch.Events[0].Outcome != "acknowledged for webhook; search pending" {
		t.Fatalf("ack --consumer webhook S2: %+v, %v", ch, err)
	}
	if d := f.deliveries(t, "S2"); !maps.Equal(d, map[string]string{"search": "pending/2", "webhook": "done/10"}) {
		t.Fatalf("S2 rows after ack: %v", d)
	}
	if r := f.event(t, "S2"); r.status != "pending" || r.availableIn < 3000 {
		t.Fatalf("S2 after ack: %+v", r)
	}

	// U2: failed, routed to webhook alone → deleted.
	ch, err = f.admin.Ack(ctx, f.db.Pool, outboxadmin.Filter{Consumer: "webhook", AggregateType: "AA_ROLE"}, outboxadmin.ChangeOptions{By: "bob"})
	if err != nil || !slices.Equal(f.names(changedIDs(ch.Events)), []string{"U2"}) || !ch.Events[0].Deleted {
		t.Fatalf("ack --consumer webhook AA_ROLE: %+v, %v", ch, err)
	}
	if r := f.event(t, "U2"); r.status != "" {
		t.Fatalf("U2 after ack: %+v", r)
	}
	// P2 is pending, not parked: left alone.
	if r := f.event(t, "P2"); r.status != "pending" {
		t.Fatalf("P2 after ack: %+v", r)
	}

	// S3: search failed, webhook done → an ack for search finishes it.
	ch, err = f.admin.Ack(ctx, f.db.Pool, outboxadmin.Filter{Consumer: "search"}, outboxadmin.ChangeOptions{All: true, By: "bob"})
	if err != nil || !slices.Equal(f.names(changedIDs(ch.Events)), []string{"S3"}) {
		t.Fatalf("ack --consumer search --all: %+v, %v", ch, err)
	}
	if r := f.event(t, "S3"); r.status != "" {
		t.Fatalf("S3 after ack: %+v", r)
	}
	if n := countJobs(t, f.db, outboxadmin.JobKindAck); n != 5 {
		t.Fatalf("%d ack jobs, want 5", n)
	}
}

func TestAdminAckAllConsumersDeletes(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	// Unqualified: failed events go, their delivery rows with them; S2
	// (pending for search) stays.
	ch, err := f.admin.Ack(t.Context(), f.db.Pool, outboxadmin.Filter{Statuses: []outbox.Status{"failed"}}, outboxadmin.ChangeOptions{All: true, By: "op"})
	if err != nil || !slices.Equal(f.names(changedIDs(ch.Events)), []string{"S1", "S3", "U1", "U2"}) {
		t.Fatalf("ack --all failed: %+v, %v", ch, err)
	}
	var rows int
	f.db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM aa_outbox_delivery`).Scan(&rows)
	if rows != 2 || f.event(t, "S2").status != "pending" {
		t.Fatalf("%d delivery rows left (want S2's 2), S2 %+v", rows, f.event(t, "S2"))
	}
}

func TestAdminStatusConsumers(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	f.exec(t, `INSERT INTO aa_outbox_consumer (consumer, state, paused_at, reason, probes, probe_at, instance)
VALUES ('webhook', 'paused', now() - interval '5 minutes', 'HTTP 503 Service Unavailable', 3, now() + interval '8 seconds', 'host-1')`)
	f.exec(t, `INSERT INTO aa_outbox_delivery (event_id, consumer, aggregate_type, aggregate_id, state, attempts)
VALUES ($1, 'old-hook', 'DDM_ENTITY', NULL, 'failed', 4)`, f.ids["S2"])
	// The configured consumers are the read model's.
	m := readModel(t, f.db, true, 0)
	s, w := consumer(t, m, "search"), consumer(t, m, "webhook")
	// search: S2 row pending + P1; S3 row failed + U1.
	if s.Pending != 2 || s.Failed != 2 || s.Paused != nil {
		t.Fatalf("search: %+v", s)
	}
	// webhook: P1, P2; S1, S2 rows + U1, U2.
	if w.Pending != 2 || w.Failed != 4 || w.State != "paused" || w.Paused == nil ||
		w.Paused.Reason != "HTTP 503 Service Unavailable" || w.Paused.Probes != 3 || w.Paused.ProbeAt == nil {
		t.Fatalf("webhook: %+v %+v", w, w.Paused)
	}
	// A consumer no longer configured is the census's, with its rows.
	rep, err := f.admin.Status(t.Context(), f.db.Pool)
	if err != nil || len(rep.Unconfigured) != 1 || rep.Unconfigured[0].Consumer != "old-hook" || rep.Unconfigured[0].Failed != 1 {
		t.Fatalf("unconfigured: %+v, %v", rep.Unconfigured, err)
	}
	// Without routing every consumer with rows is unconfigured.
	rep, err = outboxadmin.New(f.db.Schema).Status(t.Context(), f.db.Pool)
	if err != nil || len(rep.Unconfigured) != 3 || rep.Unconfigured[0].Consumer != "old-hook" || rep.Unconfigured[2].Failed != 2 ||
		rep.Unconfigured[2].State != "paused" || rep.Unconfigured[2].Instance == nil {
		t.Fatalf("status without routing: %+v, %v", rep.Unconfigured, err)
	}
}
