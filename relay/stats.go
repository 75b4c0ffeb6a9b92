package relay

import (
	"sync/atomic"
	"time"
)

// BatchStats are the figures of one batch, given to Config.OnBatch.
type BatchStats struct {
	Partitions int // partitions the batch was claimed from
	Claimed    int // deliverable events claimed
	Dispatched int // delivered to every routed consumer
	Stale      int // of Dispatched: at least one consumer already held a newer version
	Retried    int // back to pending with backoff
	Failed     int // failed (poison, or attempts exhausted)
	Skipped    int // no route wanted the event
	Untouched  int // behind a non-delivered event of its aggregate, or not attempted
	// Split counts events whose consumers went different ways (some have
	// it, some not yet): they got delivery rows.
	Split  int
	Fenced int // outcomes not written because the partition lease was lost
	// Overtaken counts events claimed after a later event of their
	// aggregate was delivered: committed out of id order by a producer
	// that skipped the aggregate lock (docs/ordering.md). They are
	// delivered all the same.
	Overtaken int

	// Pipelined says the batch was claimed while the previous one was
	// delivered (see the package doc).
	Pipelined bool

	// Time spent in each step. When pipelined, the claim ran beside the
	// previous batch's delivery and the ack beside the next one's: Claim and
	// Ack are their own durations, not time the relay waited for them.
	Claim, Deliver, Ack time.Duration
}

// Stats are the relay's totals since it was created.
type Stats struct {
	// Claims counts claim statements (empty ones too): with no work it grows
	// by one per poll interval or NOTIFY, never faster.
	Claims                                                                           uint64
	Batches, Claimed, Dispatched, Stale, Retried, Failed, Skipped, Untouched, Fenced uint64
	// Split counts events whose consumers went different ways.
	Split uint64
	// Overtaken counts events delivered after a later event of their
	// aggregate (BatchStats.Overtaken).
	Overtaken uint64
	// WatermarkWait is how long the oldest id waiting for the visibility
	// watermark has waited (0: none waits, or the watermark is off), and
	// WatermarkGiveUps how often the relay stopped waiting for a
	// transaction after Watermark.MaxWait.
	WatermarkWait    time.Duration
	WatermarkGiveUps uint64
	// WatermarkSamples counts the snapshots the watermark read.
	WatermarkSamples uint64
	// Partitions is the number of partitions owned now.
	Partitions int
	// ClaimTime, DeliverTime, AckTime add up the time spent in each step.
	ClaimTime, DeliverTime, AckTime time.Duration
}

type counters struct {
	claims, split, overtaken                                                         atomic.Uint64
	batches, claimed, dispatched, stale, retried, failed, skipped, untouched, fenced atomic.Uint64
	claimNs, deliverNs, ackNs                                                        atomic.Int64
}

func (c *counters) add(b BatchStats) {
	c.batches.Add(1)
	c.claimed.Add(uint64(b.Claimed))
	c.dispatched.Add(uint64(b.Dispatched))
	c.stale.Add(uint64(b.Stale))
	c.retried.Add(uint64(b.Retried))
	c.failed.Add(uint64(b.Failed))
	c.skipped.Add(uint64(b.Skipped))
	c.untouched.Add(uint64(b.Untouched))
	c.fenced.Add(uint64(b.Fenced))
	c.split.Add(uint64(b.Split))
	c.overtaken.Add(uint64(b.Overtaken))
	c.claimNs.Add(int64(b.Claim))
	c.deliverNs.Add(int64(b.Deliver))
	c.ackNs.Add(int64(b.Ack))
}

// Stats returns the relay's totals.
func (r *Relay) Stats() Stats {
	c := &r.stats
	var wait time.Duration
	var giveUps, samples uint64
	if r.wm != nil {
		wait, giveUps, samples = r.wm.wait(), uint64(r.wm.forced.Load()), uint64(r.wm.samples.Load())
	}
	return Stats{
		Overtaken: c.overtaken.Load(), WatermarkWait: wait, WatermarkGiveUps: giveUps, WatermarkSamples: samples,
		Claims: c.claims.Load(), Batches: c.batches.Load(), Claimed: c.claimed.Load(), Dispatched: c.dispatched.Load(),
		Stale: c.stale.Load(), Retried: c.retried.Load(), Failed: c.failed.Load(),
		Skipped: c.skipped.Load(), Untouched: c.untouched.Load(), Fenced: c.fenced.Load(),
		Split:      c.split.Load(),
		Partitions: r.leases.count(),
		ClaimTime:  time.Duration(c.claimNs.Load()), DeliverTime: time.Duration(c.deliverNs.Load()),
		AckTime: time.Duration(c.ackNs.Load()),
	}
}
