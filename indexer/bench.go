package indexer

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// BulkRate is the result of RawBulkRate.
type BulkRate struct {
	Docs        int
	Requests    int
	Concurrency int
	Conflicts   int           // items answered 409 (a newer version was there: requests in flight overtook each other)
	Elapsed     time.Duration // from the first request to the end of the final refresh
	PerSecond   float64       // Docs / Elapsed
}

func (r BulkRate) String() string {
	return fmt.Sprintf("%d docs in %d requests (concurrency %d, %d version conflicts) in %s: %.0f docs/s",
		r.Docs, r.Requests, r.Concurrency, r.Conflicts, r.Elapsed.Round(time.Millisecond), r.PerSecond)
}

// RawBulkRate measures the engine's own _bulk rate: it sends ops (their
// ids, versions and documents as given; Index replaced by index) straight to
// eng in requests of batchSize ops, one request at a time, then refreshes
// index so that everything is searchable, and returns docs per second. It is
// the denominator of the end-to-end benchmark (outbox → searchable documents),
// which should be run in the same process with the same ops and batch size.
// Every item must succeed (2xx) or meet a newer version (409, counted in
// Conflicts: with requests in flight beside each other, an older version of a
// document can arrive after a newer one, as in the consumer): any other
// answer is an error, since the rate would mean nothing.
func RawBulkRate(ctx context.Context, eng Engine, index string, ops []BulkOp, batchSize int) (BulkRate, error) {
	return RawBulkRateConcurrent(ctx, eng, index, ops, batchSize, 1)
}

// RawBulkRateConcurrent is RawBulkRate with up to concurrency requests in
// flight (to compare with a Writer of the same Concurrency).
func RawBulkRateConcurrent(ctx context.Context, eng Engine, index string, ops []BulkOp, batchSize, concurrency int) (BulkRate, error) {
	if batchSize <= 0 {
		batchSize = 1000
	}
	if concurrency <= 0 {
		concurrency = 1
	}
	batches := make([][]BulkOp, 0, len(ops)/batchSize+1)
	for start := 0; start < len(ops); start += batchSize {
		end := min(start+batchSize, len(ops))
		b := make([]BulkOp, end-start)
		copy(b, ops[start:end])
		for i := range b {
			b[i].Index = index
		}
		batches = append(batches, b)
	}
	var conflicts atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(concurrency)
	begin := time.Now()
	for _, b := range batches {
		g.Go(func() error {
			res, err := eng.Bulk(gctx, b)
			if err != nil {
				return fmt.Errorf("raw bulk rate: %w", err)
			}
			for i, r := range res {
				if r.Status == http.StatusConflict {
					conflicts.Add(1)
					continue
				}
				if r.Status < 200 || r.Status > 299 {
					return fmt.Errorf("raw bulk rate: %s %s/%s v%d: %d %s: %s", b[i].Type, index, b[i].ID, b[i].Version, r.Status, r.ErrType, r.ErrReason)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return BulkRate{}, err
	}
	if err := eng.Refresh(ctx, index); err != nil {
		return BulkRate{}, fmt.Errorf("raw bulk rate: %w", err)
	}
	el := time.Since(begin)
	return BulkRate{Docs: len(ops), Requests: len(batches), Concurrency: concurrency, Conflicts: int(conflicts.Load()), Elapsed: el,
		PerSecond: float64(len(ops)) / el.Seconds()}, nil
}
