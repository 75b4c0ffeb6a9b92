package relay

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
)

// noop delivers everything at once; with down set it is a consumer whose
// destination is away (every event Unavailable).
type noop struct {
	name string
	down bool
}

func (n noop) Name() string { return cmp.Or(n.name, "noop") }
func (n noop) Deliver(_ context.Context, events []*outbox.Event) []delivery.Outcome {
	out := make([]delivery.Outcome, len(events))
	for i := range out {
		out[i] = delivery.Ok()
		if n.down {
			out[i] = delivery.Unavailablef("down")
		}
	}
	return out
}

const (
	benchRows = 20000
	benchAggs = 200
)

// fillOutbox replaces the outbox with benchRows pending events over benchAggs
// aggregates, payloads shaped like the spec's example.
func fillOutbox(b *testing.B, pool *pgxpool.Pool) {
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `TRUNCATE aa_outbox_event, aa_outbox_delivery`); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
WITH a AS (SELECT array_agg(gen_random_uuid()) AS ids FROM generate_series(1, $2::int))
INSERT INTO aa_outbox_event (event_type, aggregate_type, aggregate_id, payload)
SELECT 'entity.customer.updated', 'DDM_ENTITY', a.ids[1 + g % $2::int],
       jsonb_build_object('tenant_key', 'public', 'entity_type', 'customer', 'entity_id', a.ids[1 + g % $2::int],
                          'code', 'C-' || g, 'version', g, 'before', jsonb_build_object('status', 'draft'),
                          'after', jsonb_build_object('status', 'active'),
                          'actor', jsonb_build_object('principal_type', 'user', 'principal_id', gen_random_uuid()))
FROM a, generate_series(1, $1::int) g`, benchRows, benchAggs); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE aa_outbox_event`); err != nil {
		b.Fatal(err)
	}
}

// bareBatch is one step of the baseline: SELECT … FOR UPDATE SKIP LOCKED
// LIMIT n and UPDATE … SET status = 'dispatched' in one transaction. It
// returns how many rows it handled.
func bareBatch(b *testing.B, pool *pgxpool.Pool, batch int) int {
	ctx := context.Background()
	n := 0
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id, tenant_id, event_type, schema_version, aggregate_type, aggregate_id,
       audit_log_id, correlation_id, payload, attempts, last_error, available_at, created_at, created_by
FROM aa_outbox_event WHERE status = 'pending' AND available_at <= now()
ORDER BY available_at, id LIMIT $1 FOR UPDATE SKIP LOCKED`, batch)
		if err != nil {
			return err
		}
		var ids []int64
		for rows.Next() {
			var e outbox.Event
			if err := rows.Scan(&e.ID, &e.TenantID, &e.EventType, &e.SchemaVersion, &e.AggregateType, &e.AggregateID,
				&e.AuditLogID, &e.CorrelationID, &e.Payload, &e.Attempts, &e.LastError, &e.AvailableAt, &e.CreatedAt, &e.CreatedBy); err != nil {
				return err
			}
			ids = append(ids, e.ID)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		n = len(ids)
		if n == 0 {
			return nil
		}
		_, err = tx.Exec(ctx, `UPDATE aa_outbox_event SET status = 'dispatched', dispatched_at = now() WHERE id = ANY($1)`, ids)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// relayBatch is one step of the relay itself: the claim (partitions,
// blockers), routing to a no-op consumer and the fenced
// one-statement ack. It returns how many events it dispatched. The ack and
// the claim the batch leaves running (pipelining) are waited for within the
// step, so that they do not run during the bare loop's turn.
func relayBatch(b *testing.B, r *Relay) int {
	before := r.handled()
	if _, err := r.batch(context.Background()); err != nil {
		b.Fatal(err)
	}
	if err := r.settle(context.Background(), -1); err != nil {
		b.Fatal(err)
	}
	if r.next != nil {
		<-r.next.done
	}
	return int(r.handled() - before)
}

// handled counts the events whose outcome was written: dispatched, or
// delivered to some consumers while another is paused (split).
func (r *Relay) handled() uint64 {
	st := r.Stats()
	return st.Dispatched + st.Split
}

// BenchmarkClaimAck compares the relay's claim + ack throughput (no-op
// consumer) with a bare SKIP LOCKED claim + UPDATE loop over the same rows, in
// the same run: two schemas are filled with the same 20,000 events (200
// aggregates), and the two loops take turns batch by batch, so that both see
// the same load on a shared machine. Run it with
//
//	go test ./relay -run '^$' -bench ClaimAck -benchtime 3x
//
// It reports bare_events/s, relay_events/s and their ratio (relay/bare), and
// PostgreSQL's CPU per event of each side (pg_bare_µs/event, pg_relay_µs/event,
// pg_ratio: relay/bare; the server's processes, sampled around each step, so
// another job on the machine adds to both), for batch sizes 500 (the
// default first claim), 1000 and 4000 (the default max_batch_size), the
// relay's batch fixed at the bare loop's.
//
// watermark=on runs the relay with its visibility watermark (the default),
// released past the filled rows before the clock starts (no producer
// writes meanwhile, so it does not sample during the steps); off leaves it
// out. Both detect out-of-order events (a probe per claimed event).
func BenchmarkClaimAck(b *testing.B) {
	for _, batch := range []int{500, 1000, 4000} {
		for _, wm := range []string{"on", "off"} {
			b.Run(fmt.Sprintf("batch=%d/watermark=%s", batch, wm), func(b *testing.B) {
				benchClaimAck(b, batch, []Route{{Consumer: noop{}}}, wm)
			})
		}
	}
}

// BenchmarkClaimAckConsumers is the same comparison with several consumers
// on every event: two that both succeed (the outbox row alone records it:
// no extra write), three that all succeed, and two of which one is down
// (paused: every event gets a delivery row per consumer, the cost of an
// outage). Run it with
//
//	go test ./relay -run '^$' -bench ClaimAckConsumers -benchtime 3x
func BenchmarkClaimAckConsumers(b *testing.B) {
	for name, routes := range map[string][]Route{
		"two":          {{Consumer: noop{name: "a"}}, {Consumer: noop{name: "b"}}},
		"three":        {{Consumer: noop{name: "a"}}, {Consumer: noop{name: "b"}}, {Consumer: noop{name: "c"}}},
		"two_one_down": {{Consumer: noop{name: "a"}}, {Consumer: noop{name: "b", down: true}}},
	} {
		b.Run(name, func(b *testing.B) { benchClaimAck(b, 500, routes, "on") })
	}
}

func benchClaimAck(b *testing.B, batch int, routes []Route, watermark string) {
	bareDB, relayDB := testenv.NewDB(b), testenv.NewDB(b)
	r, err := New(relayDB.Pool, Config{Schema: relayDB.Schema, BatchSize: batch, MaxBatchSize: batch, LeaseTTL: time.Minute,
		Routes: routes, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Watermark: Watermark{Mode: watermark}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := r.leases.prepare(ctx); err != nil {
		b.Fatal(err)
	}
	if err := r.leases.tick(ctx); err != nil {
		b.Fatal(err)
	}
	if r.leases.count() != r.cfg.Partitions {
		b.Fatalf("owns %d partitions", r.leases.count())
	}
	var bare, rel, pgBare, pgRel time.Duration
	var nBare, nRel int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		fillOutbox(b, bareDB.Pool)
		fillOutbox(b, relayDB.Pool)
		for ci := range r.cons.list {
			r.cons.state[ci] = pauseState{}
		}
		releaseAll(b, r)
		b.StartTimer()
		bareDone, relDone := false, false
		for step := 0; !bareDone || !relDone; step++ {
			// Alternate which side goes first.
			sides := []func(){
				func() {
					if bareDone {
						return
					}
					c0, t := testenv.ReadCPU(), time.Now()
					n := bareBatch(b, bareDB.Pool, batch)
					bare += time.Since(t)
					pgBare += testenv.ReadCPU().Sub(c0).Postgres
					nBare += n
					bareDone = n == 0
				},
				func() {
					if relDone {
						return
					}
					c0, t := testenv.ReadCPU(), time.Now()
					n := relayBatch(b, r)
					rel += time.Since(t)
					pgRel += testenv.ReadCPU().Sub(c0).Postgres
					nRel += n
					relDone = n == 0
				},
			}
			if step%2 == 1 {
				sides[0], sides[1] = sides[1], sides[0]
			}
			sides[0]()
			sides[1]()
		}
	}
	if nBare != b.N*benchRows || nRel != b.N*benchRows {
		b.Fatalf("bare handled %d, relay %d, want %d each", nBare, nRel, b.N*benchRows)
	}
	bareRate := float64(nBare) / bare.Seconds()
	relRate := float64(nRel) / rel.Seconds()
	b.ReportMetric(bareRate, "bare_events/s")
	b.ReportMetric(relRate, "relay_events/s")
	b.ReportMetric(relRate/bareRate, "ratio")
	us := func(d time.Duration, n int) float64 { return float64(d.Microseconds()) / float64(n) }
	b.ReportMetric(us(pgBare, nBare), "pg_bare_µs/event")
	b.ReportMetric(us(pgRel, nRel), "pg_relay_µs/event")
	b.ReportMetric(float64(pgRel)/float64(max(pgBare, 1)), "pg_ratio")
	st := r.Stats()
	b.ReportMetric(float64(st.ClaimTime.Microseconds())/float64(st.Batches)/1000, "claim_ms/batch")
	b.ReportMetric(float64(st.AckTime.Microseconds())/float64(st.Batches)/1000, "ack_ms/batch")
}

// releaseAll samples until the watermark (when on) has released every
// event in the outbox: two samples when no transaction writes meanwhile.
func releaseAll(b *testing.B, r *Relay) {
	if r.wm == nil {
		return
	}
	ctx := context.Background()
	var last int64
	if err := r.pool.QueryRow(ctx, "SELECT coalesce(max(id), 0) FROM "+pgx.Identifier{r.cfg.Schema}.Sanitize()+".aa_outbox_event").Scan(&last); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for r.wm.released() < last {
		if time.Now().After(deadline) {
			b.Fatalf("watermark at %d after 30s, want %d", r.wm.released(), last)
		}
		if _, err := r.wm.step(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// engineLike answers after a delay per event, as a search engine's _bulk
// would (about what the realistic benchmark's engine takes per event), so
// that claims, deliveries and acks can overlap as they do end to end.
type engineLike struct{ perEvent time.Duration }

func (engineLike) Name() string { return "engine-like" }
func (c engineLike) Deliver(ctx context.Context, events []*outbox.Event) []delivery.Outcome {
	select {
	case <-ctx.Done():
		return make([]delivery.Outcome, len(events))
	case <-time.After(time.Duration(len(events)) * c.perEvent):
	}
	out := make([]delivery.Outcome, len(events))
	for i := range out {
		out[i] = delivery.Ok()
	}
	return out
}

// BenchmarkDrainHotAggregates runs the relay in its default configuration
// (Run: claims, deliveries and acks as in production) over a backlog of
// 40,000 events whose aggregates are distributed like the realistic
// workload's (80 % on 200 hot aggregates, the rest over 1,800), to a
// consumer that answers after 15 µs per event, and reports the drain rate,
// PostgreSQL's and this process's CPU per event and the claims made (ns/op
// includes filling the outbox; events/s is the drain's). It isolates the
// relay's pipeline from the engine's noise:
//
//	go test ./relay -run '^$' -bench DrainHotAggregates -benchtime 1x -count 3
func BenchmarkDrainHotAggregates(b *testing.B) {
	db := testenv.NewDB(b)
	ctx := context.Background()
	const events = 40000
	for range b.N {
		if _, err := db.Pool.Exec(ctx, `TRUNCATE aa_outbox_event, aa_outbox_delivery`); err != nil {
			b.Fatal(err)
		}
		if _, err := db.Pool.Exec(ctx, `
INSERT INTO aa_outbox_event (event_type, aggregate_type, aggregate_id, payload)
SELECT 'entity.customer.updated', 'DDM_ENTITY',
       md5((CASE WHEN g % 5 = 0 THEN 1000 + g % 1800 ELSE g % 200 END)::text)::uuid,
       jsonb_build_object('tenant_key', 'public', 'code', 'C-' || g, 'version', g,
                          'before', jsonb_build_object('status', 'draft'), 'after', jsonb_build_object('status', 'active'))
FROM generate_series(1, $1::int) g`, events); err != nil {
			b.Fatal(err)
		}
		if _, err := db.Pool.Exec(ctx, `VACUUM ANALYZE aa_outbox_event`); err != nil {
			b.Fatal(err)
		}
		batched := make(chan struct{}, 1) // a batch was recorded: the wait below looks again
		r, err := New(db.Pool, Config{Schema: db.Schema, Routes: []Route{{Consumer: engineLike{15 * time.Microsecond}}},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), OnBatch: func(BatchStats) {
				select {
				case batched <- struct{}{}:
				default:
				}
			}})
		if err != nil {
			b.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		c0, t0 := testenv.ReadCPU(), time.Now()
		go func() { defer close(done); r.Run(rctx) }()
		// The relay's own counters say when every event is acked: a query
		// polling the outbox would cost PostgreSQL CPU that the figures
		// then count as the relay's.
		// Looked at after each recorded batch: a loop waking every
		// millisecond cost this process CPU the figures counted as the
		// relay's.
		for st := r.Stats(); st.Dispatched+st.Failed+st.Skipped < uint64(events); st = r.Stats() {
			select {
			case <-batched:
			case <-time.After(250 * time.Millisecond): // a safety net: OnBatch comes after the counters moved
			}
		}
		took, cpu := time.Since(t0), testenv.ReadCPU().Sub(c0)
		cancel()
		<-done
		var pending int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM aa_outbox_event WHERE status = 'pending'`).Scan(&pending); err != nil || pending != 0 {
			b.Fatalf("%d events still pending after the relay acked them all: %v", pending, err)
		}
		st := r.Stats()
		us := func(d time.Duration) float64 { return float64(d.Microseconds()) / events }
		b.ReportMetric(events/took.Seconds(), "events/s")
		b.ReportMetric(us(cpu.Postgres), "postgres_µs/event")
		b.ReportMetric(us(cpu.Self), "relay_µs/event")
		b.ReportMetric(float64(st.Claims), "claims")
		b.Logf("%d events in %s: %.0f/s; %d claims, %d batches; %s", events, took.Round(time.Millisecond), events/took.Seconds(), st.Claims, st.Batches, cpu)
	}
}
