package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/compaction"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/lag"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/outbox/outboxadmin"
	"github.com/searchsync/searchsync/relay"
	"github.com/searchsync/searchsync/sink"
	"github.com/searchsync/searchsync/sink/webhook"
)

const relaySecret = "whsec_c2VhcmNoc3luYy10ZXN0LXNlY3JldC0xMjM0NTY3OA=="

// endpoint is a real receiver: it checks every signature and records the
// first successful delivery of each event per aggregate.
type endpoint struct {
	mu     sync.Mutex
	first  map[uuid.UUID][]int64
	seen   map[int64]bool
	answer func(m sink.Message) int
	bad    int
}

func newEndpoint(t *testing.T) (*endpoint, string) {
	ep := &endpoint{first: map[uuid.UUID][]int64{}, seen: map[int64]bool{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ep.mu.Lock()
		defer ep.mu.Unlock()
		if err := webhook.Verify(relaySecret, r.Header, body); err != nil {
			ep.bad++
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var m sink.Message
		json.Unmarshal(body, &m)
		status := http.StatusNoContent
		if ep.answer != nil {
			status = ep.answer(m)
		}
		if status < 300 && !ep.seen[m.ID] {
			ep.seen[m.ID] = true
			ep.first[*m.AggregateID] = append(ep.first[*m.AggregateID], m.ID)
		}
		w.WriteHeader(status)
		if status == http.StatusUnprocessableEntity {
			io.WriteString(w, `{"error":"customer code missing"}`)
		}
	}))
	t.Cleanup(srv.Close)
	return ep, srv.URL
}

func (ep *endpoint) setAnswer(f func(m sink.Message) int) {
	ep.mu.Lock()
	ep.answer = f
	ep.mu.Unlock()
}

func (ep *endpoint) delivered(id int64) bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.seen[id]
}

type eventRow struct {
	Status    string
	Attempts  int
	LastError *string
}

func getRow(t *testing.T, db *testenv.DB, id int64) eventRow {
	var r eventRow
	err := db.Pool.QueryRow(context.Background(), `SELECT status::text, attempts, last_error FROM aa_outbox_event WHERE id = $1`, id).
		Scan(&r.Status, &r.Attempts, &r.LastError)
	if errors.Is(err, pgx.ErrNoRows) {
		return eventRow{Status: "deleted"}
	}
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The webhook consumer behind the real relay: every request verifies, every
// aggregate arrives in id order; a 422 fails its event at once, a 503 after
// max_attempts, each blocking only its aggregate; `outbox retry` releases
// one, `outbox ack` the other; compaction then removes what was dispatched.
func TestWebhookBehindTheRelay(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ep, url := newEndpoint(t)

	const aggs, perAgg = 12, 5
	ids := make([]uuid.UUID, aggs)
	for i := range ids {
		ids[i] = uuid.New()
	}
	poisoned, flaky := ids[0], ids[1]
	seq := func(m sink.Message) int {
		var p struct{ Seq int }
		json.Unmarshal(m.Payload, &p)
		return p.Seq
	}
	ep.setAnswer(func(m sink.Message) int {
		switch {
		case *m.AggregateID == poisoned && seq(m) == 2:
			return http.StatusUnprocessableEntity
		case *m.AggregateID == flaky && seq(m) == 1:
			// One event the endpoint keeps failing while it takes the
			// others: that event's own failure (attempts count).
			return http.StatusInternalServerError
		}
		return http.StatusNoContent
	})

	hook, err := webhook.New("hook", webhook.Config{URL: url, Secret: relaySecret, Timeout: 2 * time.Second, Concurrency: 4}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(db.Pool, relay.Config{
		Schema: db.Schema, Partitions: 4, BatchSize: 20, PollInterval: 100 * time.Millisecond, LeaseTTL: time.Second,
		MaxAttempts: 3, Backoff: relay.Backoff{Initial: 100 * time.Millisecond, Max: 200 * time.Millisecond, Multiplier: 2, Jitter: 0.1},
		Routes: []relay.Route{{Consumer: hook}}, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	// Write the events concurrently through the producer API, one
	// transaction per event, aggregates interleaved.
	w := outbox.NewWriter(outbox.WriterConfig{Schema: db.Schema})
	byAgg := map[uuid.UUID][]int64{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range aggs {
		wg.Go(func() {
			for seq := range perAgg {
				var got []int64
				err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
					var err error
					got, err = w.Write(ctx, tx, outbox.Event{EventType: "entity.customer.updated", AggregateType: "DDM_ENTITY",
						AggregateID: &ids[i], Payload: json.RawMessage(fmt.Sprintf(`{"seq": %d}`, seq))})
					return err
				})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				byAgg[ids[i]] = append(byAgg[ids[i]], got[0])
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// Other traffic goes on while the flaky head fails: an event fails only
	// when it alone keeps failing while the consumer delivers others (with
	// nothing else to deliver, the endpoint would count as down and the
	// consumer would pause instead).
	filler := uuid.New()
	fillerCtx, stopFiller := context.WithCancel(ctx)
	fillerDone := make(chan int)
	go func() {
		n := 0
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for fillerCtx.Err() == nil {
			if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
				_, err := w.Write(ctx, tx, outbox.Event{EventType: "entity.customer.updated", AggregateType: "DDM_ENTITY",
					AggregateID: &filler, Payload: json.RawMessage(fmt.Sprintf(`{"seq": %d}`, 100+n))})
				return err
			}); err != nil {
				t.Error(err)
				break
			}
			n++
			select {
			case <-fillerCtx.Done():
			case <-tk.C:
			}
		}
		fillerDone <- n
	}()

	admin := outboxadmin.New(db.Schema)
	poisonHead, flakyHead := byAgg[poisoned][2], byAgg[flaky][1]
	waitStatus(t, admin, db, "the two heads failed", func(rep *outboxadmin.StatusReport) bool {
		return rep.ByStatus[outbox.StatusFailed] == 2
	})
	stopFiller()
	fillers := <-fillerDone
	waitStatus(t, admin, db, "every other event dispatched", func(rep *outboxadmin.StatusReport) bool {
		return rep.ByStatus[outbox.StatusDispatched] == int64(aggs*perAgg-2-2-3+fillers)
	})
	if got := getRow(t, db, poisonHead); got.Attempts != 1 || !strings.Contains(*got.LastError, "hook: HTTP 422") || !strings.Contains(*got.LastError, "customer code missing") {
		t.Fatalf("poisoned head: %+v", got)
	}
	if got := getRow(t, db, flakyHead); got.Attempts != 3 || !strings.Contains(*got.LastError, "hook: HTTP 500") {
		t.Fatalf("flaky head: %+v", got)
	}
	if s, err := lag.NewReader(db.Pool, db.Schema, nil, nil).Read(ctx); err != nil || s.BlockedCount != 2 {
		t.Fatalf("blocked aggregates %+v (%v), want the poisoned and the flaky one", s, err)
	}

	// The endpoint recovers; the operator retries the flaky aggregate and
	// acknowledges the poisoned event.
	ep.setAnswer(nil)
	if ch, err := admin.Retry(ctx, db.Pool, outboxadmin.Filter{AggregateID: &flaky}, outboxadmin.ChangeOptions{By: "test"}); err != nil || ch.Count != 1 {
		t.Fatalf("retry: %+v, %v", ch, err)
	}
	if ch, err := admin.Ack(ctx, db.Pool, outboxadmin.Filter{IDs: []int64{poisonHead}}, outboxadmin.ChangeOptions{By: "test", Note: "bad data"}); err != nil || ch.Count != 1 {
		t.Fatalf("ack: %+v, %v", ch, err)
	}
	waitStatus(t, admin, db, "the released aggregates delivered", func(rep *outboxadmin.StatusReport) bool {
		return rep.ByStatus[outbox.StatusDispatched] == int64(aggs*perAgg-1+fillers)
	})
	if ep.delivered(poisonHead) {
		t.Fatal("the acknowledged event was delivered")
	}

	ep.mu.Lock()
	if ep.bad != 0 {
		t.Errorf("%d requests did not verify", ep.bad)
	}
	byAgg[filler] = nil // checked by count above
	for agg, want := range byAgg {
		if agg == filler {
			continue
		}
		got := ep.first[agg]
		if agg == poisoned {
			want = append(append([]int64(nil), want[:2]...), want[3:]...)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("aggregate %s: first deliveries %v, want %v", agg, got, want)
		}
	}
	ep.mu.Unlock()

	// Ten days later: compaction removes every dispatched event.
	if _, err := db.Pool.Exec(ctx, `UPDATE aa_outbox_event SET dispatched_at = dispatched_at - interval '11 days'`); err != nil {
		t.Fatal(err)
	}
	comp, err := compaction.New(db.Pool, compaction.Config{Schema: db.Schema, BatchSize: 25})
	if err != nil {
		t.Fatal(err)
	}
	res, err := comp.Run(ctx)
	if n := aggs*perAgg - 1 + fillers; err != nil || res.Deleted != int64(n) || int(res.Batches) < (n+24)/25 {
		t.Fatalf("compaction: %+v, %v", res, err)
	}
}

// waitStatus polls the outbox status until cond holds, failing with the last
// status after 30 s.
func waitStatus(t *testing.T, admin *outboxadmin.Admin, db *testenv.DB, what string, cond func(*outboxadmin.StatusReport) bool) {
	t.Helper()
	var last []byte
	deadline := time.Now().Add(30 * time.Second)
	for {
		rep, err := admin.Status(context.Background(), db.Pool)
		if err != nil {
			t.Fatal(err)
		}
		if cond(rep) {
			return
		}
		last, _ = json.Marshal(rep)
		if time.Now().After(deadline) {
			t.Fatalf("not within 30s: %s; last status %s", what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
