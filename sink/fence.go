package sink

import (
	"context"
	"errors"

	"github.com/searchsync/searchsync/outbox"
)

// ErrLeaseExpired is the cause of a delivery context that the relay cancelled
// because it can no longer prove it owns the partitions of the batch.
var ErrLeaseExpired = errors.New("partition lease deadline passed: this relay may no longer own the partition")

// Lease is what a consumer can ask about the relay's ownership of the
// events it delivers: the fencing token of an event's partition, and whether
// the relay may still send at all.
type Lease interface {
	// Token is the partition of e and the epoch of the lease under which it
	// was claimed. Receivers keep the highest epoch seen per partition and drop
	// a request that carries a lower one: it comes from a relay that lost the
	// partition.
	Token(e *outbox.Event) (partition int, epoch int64, ok bool)
	// Check returns ErrLeaseExpired once the relay's local lease deadline
	// (last renewal + lease_ttl - a safety margin, on the monotonic clock) has
	// passed. A consumer calls it right before every request it sends.
	Check() error
}

type leaseKey struct{}

// WithLease returns ctx carrying l (the relay does this for every batch).
func WithLease(ctx context.Context, l Lease) context.Context {
	return context.WithValue(ctx, leaseKey{}, l)
}

// LeaseOf returns the lease of the delivery context, if any.
func LeaseOf(ctx context.Context) (Lease, bool) {
	l, ok := ctx.Value(leaseKey{}).(Lease)
	return l, ok
}

// CheckLease returns ErrLeaseExpired when ctx carries a lease whose deadline
// has passed, or ctx's own error; nil otherwise. Consumers call it before
// every request.
func CheckLease(ctx context.Context) error {
	if l, ok := LeaseOf(ctx); ok {
		if err := l.Check(); err != nil {
			return err
		}
	}
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return nil
}

// Header names of the fencing token on webhook requests and NATS messages.
const (
	HeaderPartition  = "Searchsync-Partition"
	HeaderLeaseEpoch = "Searchsync-Lease-Epoch"
)
