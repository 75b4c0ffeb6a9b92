// Package delivery owns the vocabulary of one delivery that the relay, the
// consumers (package sink) and the engine layer (package indexer) share: the
// Outcome of one event at one consumer, and the partition lease a delivery
// context carries (the fence a consumer checks before every request). It
// imports nothing of the project but outbox, so that any layer may use it;
// it is the one name of these: consumers, the relay and indexer all write
// delivery.Outcome, delivery.Poisonf, delivery.CheckLease.
package delivery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/searchsync/searchsync/outbox"
)

// Kind is what happened to one event at one consumer.
type Kind int

const (
	// NotAttempted: the consumer did not try the event (an earlier event of
	// its aggregate in the same batch did not succeed, or the batch was
	// cancelled). The relay leaves the row as it is.
	NotAttempted Kind = iota
	// OK: delivered.
	OK
	// Stale: the consumer already holds this or a newer version (a 409
	// version conflict); counts as delivered.
	Stale
	// Retry: a failure of this event that another try may fix (an item
	// answered 5xx while its neighbours were written); the relay adds an
	// attempt and retries with backoff until the attempts run out.
	Retry
	// Poison: retrying cannot help (a mapping rejection, a payload without a
	// version, an unknown schema_version, a 4xx); the event becomes failed.
	Poison
	// Unavailable: the consumer as a whole cannot deliver now (connection
	// refused or reset, DNS, TLS handshake, timeout, the whole request
	// answered 429/5xx, a cluster block, a missing index or alias, NATS
	// without JetStream). It is not the event's fault: when the consumer
	// delivered nothing else in the batch the relay pauses the consumer and
	// probes it; the event's attempts do not move. When the consumer did
	// deliver other events of the batch (the outage began mid-batch, one
	// index of several is blocked) the event is tried again shortly, still
	// without an attempt — unless the outcome is Suspect.
	Unavailable
)

func (k Kind) String() string {
	switch k {
	case OK:
		return "ok"
	case Stale:
		return "stale"
	case Retry:
		return "retry"
	case Poison:
		return "poison"
	case Unavailable:
		return "unavailable"
	default:
		return "not_attempted"
	}
}

// Delivered reports whether the kind counts as a successful delivery.
func (k Kind) Delivered() bool { return k == OK || k == Stale }

// Outcome is the result for one event. Reason says what the consumer or the
// remote end said; the relay writes it to last_error prefixed by the
// consumer's name.
type Outcome struct {
	Kind   Kind
	Reason string
	// RetryAfter, for Retry and Unavailable, is how long the remote end asked
	// to be left alone (an HTTP Retry-After); the relay waits at least this
	// long before the next try or probe, and longer when its own backoff
	// says so. Zero: the relay's backoff alone.
	RetryAfter time.Duration
	// Suspect, for Unavailable, says the answer may be about this event
	// rather than the whole consumer (an endpoint's HTTP 500 to one request):
	// when the consumer delivered other events of the batch, the relay
	// counts it as the event's Retry, so that an event that alone keeps
	// failing ends failed after max_attempts.
	Suspect bool
}

// NoAnswerPattern is the console's error pattern (outbox's Filter.Error: *
// any text, ? one character, case-insensitive, anywhere in last_error) that
// selects a consumer's timeout. Consumers word one "no <answer> within
// <timeout>" (sink/webhook "no answer within 5s", sink/nats "no PubAck for
// <subject> within 5s"); their tests hold them to it.
const NoAnswerPattern = "no * within"

// Ok is a delivered event; Retryf, Poisonf and Unavailablef build the
// failures.
func Ok() Outcome { return Outcome{Kind: OK} }

// Retryf is a transient failure.
func Retryf(format string, args ...any) Outcome {
	return Outcome{Kind: Retry, Reason: fmt.Sprintf(format, args...)}
}

// Poisonf is a permanent failure.
func Poisonf(format string, args ...any) Outcome {
	return Outcome{Kind: Poison, Reason: fmt.Sprintf(format, args...)}
}

// Unavailablef is a consumer-wide failure (see Unavailable).
func Unavailablef(format string, args ...any) Outcome {
	return Outcome{Kind: Unavailable, Reason: fmt.Sprintf(format, args...)}
}

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
