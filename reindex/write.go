package reindex

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/searchsync/searchsync/indexer"
)

// writer sends bulk requests to the target with bounded retries: 409 is
// stale (the target already holds that version or a newer one, which is
// correct), 429 and 5xx items are retried alone with backoff, transport
// failures retry the whole request, anything else stops the reindex with the
// engine's reason.
type writer struct {
	eng     indexer.Engine
	written atomic.Int64
	stale   atomic.Int64
}

const maxWriteAttempts = 8

func (w *writer) bulk(ctx context.Context, ops []indexer.BulkOp) error {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 100 * time.Millisecond
	bo.MaxInterval = 5 * time.Second
	bo.MaxElapsedTime = 0
	pending := ops
	for attempt := 1; ; attempt++ {
		res, err := w.eng.Bulk(ctx, pending)
		if err != nil {
			if !indexer.IsTemporary(err) || attempt >= maxWriteAttempts {
				return fmt.Errorf("reindex: bulk of %d ops: %w", len(pending), err)
			}
		} else {
			var retry []indexer.BulkOp
			var lastErr string
			for i, r := range res {
				switch {
				case r.Status >= 200 && r.Status < 300:
					w.written.Add(1)
				case r.Status == http.StatusConflict:
					w.stale.Add(1)
				case r.Status == http.StatusNotFound && pending[i].Type == indexer.OpDelete:
					w.written.Add(1) // a versioned delete of a missing document: nothing to delete
				case r.Status == http.StatusTooManyRequests || r.Status >= 500:
					retry = append(retry, pending[i])
					lastErr = fmt.Sprintf("%d %s: %s", r.Status, r.ErrType, r.ErrReason)
				default:
					return fmt.Errorf("reindex: %s %s/%s version %d rejected by the engine: %d %s: %s",
						pending[i].Type, pending[i].Index, pending[i].ID, pending[i].Version, r.Status, r.ErrType, r.ErrReason)
				}
			}
			if len(retry) == 0 {
				return nil
			}
			if attempt >= maxWriteAttempts {
				return fmt.Errorf("reindex: %d ops still failing after %d attempts: %s", len(retry), attempt, lastErr)
			}
			pending = retry
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(bo.NextBackOff()):
		}
	}
}
