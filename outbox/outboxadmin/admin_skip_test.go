package outboxadmin_test

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/outbox/outboxadmin"
)

// TestAdminSkip: a skipped failed head no longer blocks its aggregate (the
// blocked listing drops it, the event behind it is the head), keeps its row
// and last_error, is recorded in aa_job with who did it, and is acknowledged
// later like any skipped event; what is not failed is refused.
func TestAdminSkip(t *testing.T) {
	t.Parallel()
	f := newAdminFixture(t)
	ctx := t.Context()
	var refused *outboxadmin.RefusedError
	for _, c := range []struct {
		name   string
		filter outboxadmin.Filter
		want   string
	}{
		{"pending event", outboxadmin.Filter{IDs: []int64{f.ids["A3"]}}, "is pending"},
		{"failed and skipped", outboxadmin.Filter{IDs: []int64{f.ids["A2"], f.ids["R1"]}}, "is skipped"},
		{"not in the outbox", outboxadmin.Filter{IDs: []int64{f.ids["A2"], 1 << 40}}, "is not in the outbox"},
		{"status", outboxadmin.Filter{AggregateID: &f.a, Statuses: []outbox.Status{"pending"}}, "failed events only, not pending"},
		{"consumer", outboxadmin.Filter{AggregateID: &f.a, Consumer: "webhook"}, "ack --consumer webhook"},
	} {
		_, err := f.admin.Skip(ctx, f.db.Pool, c.filter, outboxadmin.ChangeOptions{By: "op"})
		if !errors.As(err, &refused) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("skip of %s: %v, want a refusal saying %q", c.name, err, c.want)
		}
		// The dry run refuses the same.
		if _, err := f.admin.Skip(ctx, f.db.Pool, c.filter, outboxadmin.ChangeOptions{DryRun: true}); !errors.As(err, &refused) {
			t.Errorf("dry run of a skip of %s: %v, want a refusal", c.name, err)
		}
	}
	if _, err := f.admin.Skip(ctx, f.db.Pool, outboxadmin.Filter{Statuses: []outbox.Status{"failed"}}, outboxadmin.ChangeOptions{By: "op"}); !errors.Is(err, outboxadmin.ErrNoSelection) {
		t.Fatalf("skip without a selection: %v, want ErrNoSelection", err)
	}
	if _, err := f.admin.Skip(ctx, f.db.Pool, outboxadmin.Filter{AggregateID: &f.a}, outboxadmin.ChangeOptions{}); err == nil {
		t.Fatal("skip without By was accepted")
	}
	if st := f.status(t, "A2"); st != "failed" || countJobs(t, f.db, "") != 0 {
		t.Fatalf("the refusals changed something: A2 %s, %d aa_job rows", st, countJobs(t, f.db, ""))
	}

	// Dry run: A2, the one failed event of A; nothing changes.
	dry, err := f.admin.Skip(ctx, f.db.Pool, outboxadmin.Filter{AggregateID: &f.a}, outboxadmin.ChangeOptions{DryRun: true})
	if err != nil || !dry.DryRun || !slices.Equal(f.names(dry.Events), []string{"A2"}) || dry.JobID != 0 {
		t.Fatalf("dry run: %+v, %v", dry, err)
	}
	if st := f.status(t, "A2"); st != "failed" || countJobs(t, f.db, "") != 0 {
		t.Fatalf("the dry run changed A2 (%s) or recorded a job", st)
	}

	ch, err := f.admin.Skip(ctx, f.db.Pool, outboxadmin.Filter{AggregateID: &f.a}, outboxadmin.ChangeOptions{By: "carol@host", Note: "customer merged"})
	if err != nil || ch.Action != "skip" || ch.Count != 1 || ch.JobID == 0 || ch.Events[0].Outcome != "skipped" || ch.Events[0].Status != "skipped" {
		t.Fatalf("skip: %+v, %v", ch, err)
	}
	// The row stays, with its evidence.
	evs, err := f.admin.List(ctx, f.db.Pool, outboxadmin.Filter{IDs: []int64{f.ids["A2"]}})
	if err != nil || len(evs) != 1 || evs[0].Status != "skipped" || evs[0].Attempts != 10 || evs[0].LastError == nil || !strings.Contains(*evs[0].LastError, "422") {
		t.Fatalf("A2 after the skip: %+v, %v", evs, err)
	}
	// A is no longer blocked: its head is A3, pending and due.
	rep, err := f.admin.Status(ctx, f.db.Pool)
	m := readModel(t, f.db, false, 0)
	if err != nil || m.BlockedCount != 1 || m.Blocked[0].AggregateID != f.b || rep.ByStatus["failed"] != 0 || rep.ByStatus["skipped"] != 3 {
		t.Fatalf("status after the skip: %+v %+v, %v", rep, m.Blocked, err)
	}
	// Recorded: kind outbox_skip, who, the note, the event as it was.
	var owner string
	var params, result []byte
	if err := f.db.Pool.QueryRow(ctx, `SELECT owner, params, result FROM aa_job WHERE id = $1 AND job_kind = 'outbox_skip' AND state = 'succeeded'`,
		ch.JobID).Scan(&owner, &params, &result); err != nil {
		t.Fatal(err)
	}
	var rec struct {
		By     string  `json:"by"`
		Note   string  `json:"note"`
		IDs    []int64 `json:"ids"`
		Events []struct {
			Status  string `json:"status"`
			Outcome string `json:"outcome"`
		} `json:"events"`
	}
	if err := json.Unmarshal(result, &rec); err != nil {
		t.Fatal(err)
	}
	if owner != "carol@host" || rec.By != "carol@host" || rec.Note != "customer merged" || !slices.Equal(rec.IDs, []int64{f.ids["A2"]}) ||
		len(rec.Events) != 1 || rec.Events[0].Status != "failed" || rec.Events[0].Outcome != "skipped" || !strings.Contains(string(params), f.a.String()) {
		t.Fatalf("skip job: owner %q params %s result %s", owner, params, result)
	}
	// Skipped once, it is not failed any more: a second skip of it is refused.
	if _, err := f.admin.Skip(ctx, f.db.Pool, outboxadmin.Filter{IDs: []int64{f.ids["A2"]}}, outboxadmin.ChangeOptions{By: "op"}); !errors.As(err, &refused) {
		t.Fatalf("second skip: %v, want a refusal", err)
	}
	// It stays until acknowledged.
	ack, err := f.admin.Ack(ctx, f.db.Pool, outboxadmin.Filter{IDs: []int64{f.ids["A2"]}}, outboxadmin.ChangeOptions{By: "op"})
	if err != nil || ack.Count != 1 || f.status(t, "A2") != "" {
		t.Fatalf("ack of the skipped event: %+v, %v; A2 %q", ack, err, f.status(t, "A2"))
	}
}

// status is an event's status ("" when it is gone).
func (f *adminFixture) status(t *testing.T, name string) string {
	t.Helper()
	var s string
	_ = f.db.Pool.QueryRow(t.Context(), `SELECT status::text FROM aa_outbox_event WHERE id = $1`, f.ids[name]).Scan(&s)
	return s
}

// TestAdminSkipDiverged: skipping an event whose consumers diverged marks its
// failed delivery rows done (not delivered), so that it blocks no consumer,
// and keeps the rows; an event still pending for a consumer is not taken.
func TestAdminSkipDiverged(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	ctx := t.Context()
	// S2 is pending (search retries it): not failed, refused by id.
	var refused *outboxadmin.RefusedError
	if _, err := f.admin.Skip(ctx, f.db.Pool, outboxadmin.Filter{IDs: []int64{f.ids["S2"]}}, outboxadmin.ChangeOptions{By: "op"}); !errors.As(err, &refused) {
		t.Fatalf("skip of S2: %v, want a refusal", err)
	}
	ch, err := f.admin.Skip(ctx, f.db.Pool, outboxadmin.Filter{EventType: "entity.customer.*"}, outboxadmin.ChangeOptions{By: "op"})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.names(changedIDs(ch.Events)); !slices.Equal(got, []string{"S1", "S3", "U1"}) {
		t.Fatalf("skipped %v, want S1, S3, U1", got)
	}
	outcomes := map[string]string{}
	for _, e := range ch.Events {
		outcomes[f.names([]int64{e.ID})[0]] = e.Outcome
	}
	want := map[string]string{"S1": "skipped; webhook marked done, not delivered", "S3": "skipped; search marked done, not delivered", "U1": "skipped"}
	if !maps.Equal(outcomes, want) {
		t.Errorf("outcomes %v, want %v", outcomes, want)
	}
	for name, rows := range map[string]map[string]string{
		"S1": {"search": "done/0", "webhook": "done/10"},
		"S3": {"search": "done/1", "webhook": "done/0"},
		"U1": {},
		"S2": {"search": "pending/2", "webhook": "failed/10"},
	} {
		if got := f.deliveries(t, name); !maps.Equal(got, rows) {
			t.Errorf("%s delivery rows %v, want %v", name, got, rows)
		}
	}
	for name, st := range map[string]string{"S1": "skipped", "S3": "skipped", "U1": "skipped", "S2": "pending", "U2": "failed"} {
		if got := f.event(t, name); got.status != st || (st == "skipped" && got.lastError == nil) {
			t.Errorf("%s %+v, want %s with its last_error", name, got, st)
		}
	}
	var undelivered int
	if err := f.db.Pool.QueryRow(ctx, `SELECT count(*) FROM aa_outbox_delivery WHERE event_id = ANY($1) AND state = 'done' AND delivered_at IS NULL`,
		[]int64{f.ids["S1"], f.ids["S3"]}).Scan(&undelivered); err != nil || undelivered != 2 {
		t.Errorf("%d rows marked done without delivered_at, want 2 (%v)", undelivered, err)
	}
	// What each consumer owes no longer counts them.
	failed := map[string]int64{}
	for _, c := range readModel(t, f.db, true, 0).Consumers {
		failed[c.Name] = c.Failed
	}
	if !maps.Equal(failed, map[string]int64{"search": 0, "webhook": 2}) { // webhook: S2's row and U2
		t.Errorf("failed per consumer after the skip: %v", failed)
	}
	// Acknowledged, the rows go with the event.
	if _, err := f.admin.Ack(ctx, f.db.Pool, outboxadmin.Filter{IDs: []int64{f.ids["S1"]}}, outboxadmin.ChangeOptions{By: "op"}); err != nil || len(f.deliveries(t, "S1")) != 0 {
		t.Fatalf("ack of skipped S1: %v, rows %v", err, f.deliveries(t, "S1"))
	}
}
