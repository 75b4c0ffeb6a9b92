package outbox_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
)

// cpuTime is the process's user and system CPU so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWrite writes 1000 events (tenant, aggregate and correlation
// ids set, as a backfill's chunk) per transaction, rolled back.
// client_µs/event is this process's CPU per event: the writer's encoding.
func BenchmarkWrite(b *testing.B) {
	db := testenv.NewDB(b)
	ctx := context.Background()
	w := outbox.NewWriter(outbox.WriterConfig{Schema: db.Schema})
	tenant, corr := uuid.New(), uuid.New()
	events := make([]outbox.Event, 1000)
	for i := range events {
		events[i] = customerEvent(uuid.New(), 1)
		events[i].TenantID, events[i].CorrelationID = &tenant, &corr
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for b.Loop() {
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := w.Write(ctx, tx, events...); err != nil {
			b.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuTime(b)-cpu0).Microseconds())/float64(b.N*len(events)), "client_µs/event")
}
