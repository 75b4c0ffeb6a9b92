package sink

import "github.com/searchsync/searchsync/delivery"

// ErrLeaseExpired is the cause of a delivery context that the relay
// cancelled because it can no longer prove it owns the partitions of the
// batch (see delivery.ErrLeaseExpired).
var ErrLeaseExpired = delivery.ErrLeaseExpired

// Lease is what a consumer can ask about the relay's ownership of the events
// it delivers (see delivery.Lease).
type Lease = delivery.Lease

// WithLease, LeaseOf and CheckLease carry and check the lease of a delivery
// context (see delivery).
var (
	WithLease  = delivery.WithLease
	LeaseOf    = delivery.LeaseOf
	CheckLease = delivery.CheckLease
)

// Header names of the fencing token on webhook requests and NATS messages.
const (
	HeaderPartition  = "Searchsync-Partition"
	HeaderLeaseEpoch = "Searchsync-Lease-Epoch"
)
