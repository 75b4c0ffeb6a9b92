package relay

import (
	"testing"
	"time"
)

// sample is a visSample of a snapshot (xmin, xmax, in progress) and the
// highest visible id.
func sample(xmin, xmax uint64, maxID int64, xip ...uint64) visSample {
	return visSample{at: time.Now(), snap: pgSnapshot{xmin: xmin, xmax: xmax, xip: xip}, maxID: maxID}
}

// TestHorizonReleasesOnlyWhenEveryTransactionThatCouldHoldALowerIdEnded
// walks the release rule through its cases: a sample needs its successor;
// a transaction in progress at it holds it; so does one that got its
// transaction id after it (in progress in the successor, at or above the
// sample's xmax: it may have taken its outbox id before the sample); the
// relay's own acks hold nothing; an idle outbox leaves no sample queued.
func TestHorizonReleasesOnlyWhenEveryTransactionThatCouldHoldALowerIdEnded(t *testing.T) {
	var h horizon
	// 100 visible, transaction 50 in progress: nothing before the successor.
	if h.add(sample(50, 60, 100, 50)); h.released.Load() != 0 || !h.firstAfterIdle() {
		t.Fatalf("first sample: released %d, first after idle %v", h.released.Load(), h.firstAfterIdle())
	}
	// Successor: 50 still runs, and 61 (≥ the first's xmax 60) started.
	h.add(sample(50, 70, 120, 50, 61))
	if h.released.Load() != 0 {
		t.Fatalf("released %d while 50 runs", h.released.Load())
	}
	// 50 ended, 61 still runs: 61 may hold an id below 100.
	h.add(sample(61, 75, 130, 61))
	if h.released.Load() != 0 {
		t.Fatalf("released %d while 61 (begun after the first sample, maybe with an id below it) runs", h.released.Load())
	}
	// 61 ended: every sample up to the one before the newest is released.
	if !h.add(sample(75, 80, 140)) || h.released.Load() != 130 {
		t.Fatalf("released %d, want 130", h.released.Load())
	}
	// The newest (140) waits for its successor; nothing new comes: the lone
	// sample with nothing to release is dropped, and sampling rests.
	h.add(sample(80, 80, 140))
	if h.released.Load() != 140 || !h.oldest().IsZero() || h.firstAfterIdle() {
		t.Fatalf("idle: released %d, oldest %v, first after idle %v", h.released.Load(), h.oldest(), h.firstAfterIdle())
	}

	// An ack of this relay (90) is not waited for; a producer (91) is.
	acks := map[uint64]bool{90: true}
	h.ignore = func(x uint64) bool { return acks[x] }
	h.add(sample(90, 92, 150, 90, 91))
	h.add(sample(90, 93, 150, 90, 91))
	if h.released.Load() != 140 {
		t.Fatalf("released %d while producer 91 runs", h.released.Load())
	}
	h.add(sample(90, 94, 150, 90))
	if h.released.Load() != 150 {
		t.Fatalf("released %d, want 150 (only the ack 90 runs)", h.released.Load())
	}
}

// TestHorizonForgetsTransactionsWithoutOutboxIdsAndGivesUp: a long
// transaction that took no outbox id stops holding the samples taken before
// the look-up; one that did is given up on only by giveUp.
func TestHorizonForgetsTransactionsWithoutOutboxIdsAndGivesUp(t *testing.T) {
	var h horizon
	h.add(sample(10, 20, 100, 10, 11))
	h.add(sample(10, 21, 100, 10, 11))
	lookup := time.Now().Add(time.Millisecond)
	if h.forget(lookup, func(x uint64) bool { return x == 11 }, pgSnapshot{xmin: 10, xmax: 22, xip: []uint64{10, 11}}) || h.released.Load() != 0 {
		t.Fatalf("released %d while 11 (an outbox writer) runs", h.released.Load())
	}
	if got := h.waiting(lookup, pgSnapshot{xmin: 10, xmax: 22, xip: []uint64{10, 11}}); len(got) != 1 || got[0] != 11 {
		t.Fatalf("waiting for %v, want [11]", got)
	}
	if !h.giveUp(lookup) || h.released.Load() != 100 {
		t.Fatalf("after giving up: released %d, want 100", h.released.Load())
	}
}
