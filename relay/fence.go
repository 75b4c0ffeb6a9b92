package relay

import (
	"context"
	"time"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/outbox"
)

// Fencing of deliveries (docs/consumers.md): a batch is delivered only while
// the relay can prove it still owns the batch's partitions. The proof is
// local: the start of the last successful renewal + lease_ttl - a margin, on
// the monotonic clock, and every partition of the batch still held with the
// epoch it was claimed under. Consumers check it before every request; the
// relay cancels the delivery's context when it passes, which cuts the
// requests in flight.

// fenceMargin is how long before the lease's own expiry a relay stops
// sending: room for the clocks of this process and the database to differ
// and for a request to leave.
func fenceMargin(ttl time.Duration) time.Duration { return ttl / 5 }

// batchLease is the delivery.Lease of one batch.
type batchLease struct {
	l     *leases
	c     claimable
	part  map[int64]int32 // event id -> partition
	epoch map[int32]int64 // partition -> epoch claimed under
}

func newBatchLease(l *leases, c claimable, evs []claimed) *batchLease {
	b := &batchLease{l: l, c: c, part: make(map[int64]int32, len(evs)), epoch: make(map[int32]int64, len(c.parts))}
	for i := range evs {
		b.part[evs[i].ev.ID] = evs[i].part
	}
	for i, p := range c.parts {
		b.epoch[p] = c.epochs[i]
	}
	return b
}

// Token implements delivery.Lease.
func (b *batchLease) Token(e *outbox.Event) (int, int64, bool) {
	p, ok := b.part[e.ID]
	if !ok {
		return 0, 0, false
	}
	ep, ok := b.epoch[p]
	return int(p), ep, ok
}

// Check implements delivery.Lease.
func (b *batchLease) Check() error {
	if !b.l.holds(b.c) {
		return delivery.ErrLeaseExpired
	}
	return nil
}

// fenceDelivery cancels ctx (cause delivery.ErrLeaseExpired) when the batch's
// lease can no longer be proven, until ctx is done otherwise.
func (r *Relay) fenceDelivery(ctx context.Context, cancel context.CancelCauseFunc, b *batchLease) {
	for {
		t := time.NewTimer(time.Until(r.leases.sendDeadline()))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if err := b.Check(); err != nil {
			r.cfg.Logger.Warn("relay: lease deadline passed during a delivery; cancelling the requests in flight (the new owner delivers these events)",
				"partitions", len(b.c.parts))
			cancel(err)
			return
		}
	}
}
