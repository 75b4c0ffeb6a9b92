package relay

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/sink"
)

type noop struct{}

func (noop) Name() string { return "noop" }
func (noop) Deliver(_ context.Context, events []*outbox.Event) []sink.Outcome {
	out := make([]sink.Outcome, len(events))
	for i := range out {
		out[i] = sink.Ok()
	}
	return out
}

const (
	benchRows  = 20000
	benchAggs  = 200
	benchBatch = 500
)

// fillOutbox replaces the outbox with benchRows pending events over benchAggs
// aggregates, payloads shaped like the spec's example.
func fillOutbox(b *testing.B, pool *pgxpool.Pool) {
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `TRUNCATE aa_outbox_event`); err != nil {
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

// bareLoop is the baseline: SELECT … FOR UPDATE SKIP LOCKED LIMIT n and
// UPDATE … SET status = 'dispatched' in a transaction until nothing is left.
func bareLoop(b *testing.B, pool *pgxpool.Pool) int {
	ctx := context.Background()
	total := 0
	for {
		n := 0
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `SELECT id, tenant_id, event_type, schema_version, aggregate_type, aggregate_id,
       audit_log_id, correlation_id, payload, attempts, last_error, available_at, created_at, created_by
FROM aa_outbox_event WHERE status = 'pending' AND available_at <= now()
ORDER BY available_at, id LIMIT $1 FOR UPDATE SKIP LOCKED`, benchBatch)
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
		if n == 0 {
			return total
		}
		total += n
	}
}

// relayLoop runs the relay's own batch (claim with partitions, head-of-line
// check and routing, a no-op consumer, the fenced one-statement ack) until
// nothing is left.
func relayLoop(b *testing.B, r *Relay) int {
	ctx := context.Background()
	before := r.Stats().Dispatched
	for {
		full, err := r.batch(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if !full {
			break
		}
	}
	return int(r.Stats().Dispatched - before)
}

// BenchmarkClaimAck compares the relay's claim + ack throughput (no-op
// consumer) with a bare SKIP LOCKED claim + UPDATE loop over the same rows, in
// the same run. Run it with
//
//	go test ./relay -run '^$' -bench ClaimAck -benchtime 3x
//
// It reports bare_events/s, relay_events/s and their ratio (relay/bare).
func BenchmarkClaimAck(b *testing.B) {
	db := testenv.NewDB(b)
	r, err := New(db.Pool, Config{Schema: db.Schema, BatchSize: benchBatch, LeaseTTL: time.Minute,
		Routes: []Route{{Consumer: noop{}}}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
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
	var bare, rel time.Duration
	var nBare, nRel int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Alternate the order so neither side always runs on a warmer cache.
		runs := []func(){
			func() {
				b.StopTimer()
				fillOutbox(b, db.Pool)
				b.StartTimer()
				t := time.Now()
				nBare += bareLoop(b, db.Pool)
				bare += time.Since(t)
			},
			func() {
				b.StopTimer()
				fillOutbox(b, db.Pool)
				b.StartTimer()
				t := time.Now()
				nRel += relayLoop(b, r)
				rel += time.Since(t)
			},
		}
		if i%2 == 1 {
			runs[0], runs[1] = runs[1], runs[0]
		}
		for _, run := range runs {
			run()
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
	st := r.Stats()
	b.ReportMetric(float64(st.ClaimTime.Microseconds())/float64(st.Batches)/1000, "claim_ms/batch")
	b.ReportMetric(float64(st.AckTime.Microseconds())/float64(st.Batches)/1000, "ack_ms/batch")
}
