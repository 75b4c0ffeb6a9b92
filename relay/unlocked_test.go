package relay_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/relay"
	"github.com/searchsync/searchsync/sink/webhook"
)

// unlockedLoad is what a run of plain-SQL producers that skip the
// aggregate lock gave.
type unlockedLoad struct {
	committed  int           // events committed
	lost       int           // committed and never delivered
	violations int           // first arrivals below an earlier first arrival of their aggregate, counted at the receiver
	overtaken  uint64        // what the relay reported
	giveUps    uint64        // watermark give-ups
	p50, p99   time.Duration // commit → first arrival at the receiver
}

// runUnlocked runs producers plain-SQL producers for d: each inserts one
// event of one of aggregates hot aggregates without the advisory lock,
// holds its transaction open for a random 0–maxHold, then commits (with a
// NOTIFY). A relay delivers to a real webhook endpoint through the webhook
// consumer. It waits until every committed event arrived.
func runUnlocked(t testing.TB, watermark string, producers, aggregates int, d, maxHold time.Duration) unlockedLoad {
	db := testenv.NewDB(t)
	rc := newReceiver(t)
	hook, err := webhook.New("hook", webhook.Config{URL: rc.URL, Secret: "s", Timeout: 5 * time.Second, Concurrency: 8}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := relay.Config{Partitions: 8, Watermark: relay.Watermark{Mode: watermark}, Routes: []relay.Route{{Consumer: hook}}}
	r, _ := start(t, db, cfg)

	aggs := make([]uuid.UUID, aggregates)
	for i := range aggs {
		aggs[i] = uuid.New()
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var mu sync.Mutex
	commits := map[int64]time.Time{}
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for p := range producers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(p), 42))
			for ctx.Err() == nil {
				tx, err := db.Pool.Begin(context.Background())
				if err != nil {
					errs <- err
					return
				}
				var id int64
				if err := tx.QueryRow(context.Background(), `INSERT INTO aa_outbox_event (event_type, aggregate_type, aggregate_id, payload)
					VALUES ('entity.customer.updated', 'DDM_ENTITY', $1, '{"version": 1}') RETURNING id`, aggs[rng.IntN(len(aggs))]).Scan(&id); err != nil {
					tx.Rollback(context.Background())
					errs <- err
					return
				}
				time.Sleep(time.Duration(rng.Int64N(int64(maxHold) + 1)))
				if _, err := tx.Exec(context.Background(), "SELECT pg_notify($1, '')", db.Schema+".outbox"); err != nil {
					tx.Rollback(context.Background())
					errs <- err
					return
				}
				if err := tx.Commit(context.Background()); err != nil {
					errs <- err
					return
				}
				at := time.Now()
				mu.Lock()
				commits[id] = at
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Minute, func() bool { return rc.distinct() >= len(commits) },
		"every committed event delivered (%d of %d)", rc.distinct(), len(commits))

	res := unlockedLoad{committed: len(commits)}
	rc.mu.Lock()
	var lat []time.Duration
	for id, at := range commits {
		arr := rc.arrivals[id]
		if len(arr) == 0 {
			res.lost++
			continue
		}
		lat = append(lat, arr[0].Sub(at))
	}
	for key, ids := range rc.first {
		if key == "" {
			continue
		}
		var top int64
		for _, id := range ids {
			if id < top {
				res.violations++
			}
			top = max(top, id)
		}
	}
	rc.mu.Unlock()
	slices.Sort(lat)
	if len(lat) > 0 {
		res.p50, res.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	}
	// The relay records the outcomes after the receiver answered, and
	// counts a batch (Stats) only after its ack returned.
	testenv.Eventually(t, 30*time.Second, func() bool { return countStatus(t, db, "dispatched") == len(commits) }, "every event acked")
	testenv.Eventually(t, 30*time.Second, func() bool { return r.Stats().Dispatched >= uint64(len(commits)) }, "every batch counted")
	st := r.Stats()
	res.overtaken, res.giveUps = st.Overtaken, st.WatermarkGiveUps
	return res
}

// TestUnlockedProducersWithAndWithoutTheWatermark runs 8 producers that
// skip the aggregate lock on 10 hot aggregates, transactions held open for
// 0–300 ms. With the watermark every event arrives at the webhook in id
// order per aggregate and none is lost; without it, events arrive out of
// order and the relay reports every one the receiver counts.
func TestUnlockedProducersWithAndWithoutTheWatermark(t *testing.T) {
	t.Parallel()
	t.Run("watermark=on", func(t *testing.T) {
		t.Parallel()
		res := runUnlocked(t, "on", 8, 10, 6*time.Second, 300*time.Millisecond)
		t.Logf("%+v", res)
		if res.violations != 0 || res.lost != 0 || res.overtaken != 0 || res.committed < 50 {
			t.Errorf("watermark on: %d of %d committed out of order at the receiver, %d lost, %d reported: want all in order", res.violations, res.committed, res.lost, res.overtaken)
		}
	})
	t.Run("watermark=off", func(t *testing.T) {
		t.Parallel()
		res := runUnlocked(t, "off", 8, 10, 6*time.Second, 300*time.Millisecond)
		t.Logf("%+v", res)
		if res.lost != 0 || res.violations == 0 || res.overtaken != uint64(res.violations) {
			t.Errorf("watermark off: %d violations at the receiver, %d reported by the relay, %d lost: want some, all reported, none lost", res.violations, res.overtaken, res.lost)
		}
	})
}

// BenchmarkUnlockedProducers is the load of the issue that asked for the
// watermark: 8 plain-SQL producers without the aggregate lock on 50 hot
// aggregates for SEARCHSYNC_BENCH_DURATION (default 60s), each transaction
// held open for a random 0–500 ms, delivered through the webhook consumer
// to a real endpoint; with the watermark on and off. It reports the events
// committed, the receiver's violations of id order per aggregate, the
// relay's own count (overtaken), lost events and commit → delivered p50/p99.
//
//	go test ./relay -run '^$' -bench UnlockedProducers -benchtime 1x
func BenchmarkUnlockedProducers(b *testing.B) {
	d := time.Minute
	if v := os.Getenv("SEARCHSYNC_BENCH_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			b.Fatalf("SEARCHSYNC_BENCH_DURATION=%q: %v", v, err)
		}
	}
	for _, wm := range []string{"on", "off"} {
		b.Run("watermark="+wm, func(b *testing.B) {
			for range b.N {
				res := runUnlocked(b, wm, 8, 50, d, 500*time.Millisecond)
				b.ReportMetric(float64(res.committed), "events")
				b.ReportMetric(float64(res.violations), "violations")
				b.ReportMetric(float64(res.overtaken), "reported")
				b.ReportMetric(float64(res.lost), "lost")
				b.ReportMetric(float64(res.p50.Microseconds())/1000, "p50_ms")
				b.ReportMetric(float64(res.p99.Microseconds())/1000, "p99_ms")
				b.Logf("%s", fmt.Sprintf("watermark %s: %+v", wm, res))
			}
		})
	}
}
