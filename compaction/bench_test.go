package compaction

import (
	"testing"
	"time"

	"github.com/searchsync/searchsync/internal/testenv"
)

// BenchmarkCompact measures one run over 50,000 old dispatched events mixed
// with 50,000 recent ones (batch size 1000): rows deleted per second.
//
//	go test -run '^$' -bench Compact -benchtime 3x ./compaction
func BenchmarkCompact(b *testing.B) {
	db := testenv.NewDB(b)
	c, err := New(db.Pool, Config{Schema: db.Schema, BatchSize: 1000})
	if err != nil {
		b.Fatal(err)
	}
	const old, recent = 50_000, 50_000
	fill := func() {
		_, err := db.Pool.Exec(b.Context(), `
INSERT INTO aa_outbox_event (event_type, aggregate_type, aggregate_id, payload, status, dispatched_at)
SELECT 'entity.customer.updated', 'DDM_ENTITY', gen_random_uuid(), '{"version": 1, "name": "x"}', 'dispatched',
       CASE WHEN i % 2 = 0 THEN now() - interval '11 days' ELSE now() - interval '1 day' END
FROM generate_series(1, $1) AS i`, old+recent)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := db.Pool.Exec(b.Context(), `VACUUM ANALYZE aa_outbox_event`); err != nil {
			b.Fatal(err)
		}
	}
	var deleted int64
	var took time.Duration
	for b.Loop() {
		b.StopTimer()
		if _, err := db.Pool.Exec(b.Context(), `TRUNCATE aa_outbox_event, aa_outbox_delivery`); err != nil {
			b.Fatal(err)
		}
		fill()
		b.StartTimer()
		res, err := c.Run(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		if res.Deleted != old {
			b.Fatalf("deleted %d, want %d", res.Deleted, old)
		}
		deleted += res.Deleted
		took += res.Duration
	}
	b.ReportMetric(float64(deleted)/took.Seconds(), "rows/s")
}
