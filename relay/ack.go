package relay

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"time"
)

// ackArgs are the arguments of the ack statements.
func (r *Relay) ackArgs(c claimable, acks []ackRow) ackArgs {
	n := len(acks)
	ids := make([]int64, n)
	parts := make([]int32, n)
	attempts := make([]int32, n)
	outcome := make([]string, n)
	lastErr := make([]string, n)
	delay := make([]int64, n)
	newAttempts := make([]int32, n)
	var dID, hadRows, pID []int64
	var dConsumer, dState, dErr, pConsumer []string
	var dAttempts []int32
	var dDelay []int64
	for i, a := range acks {
		for m := a.deliveredMask; m != 0; m &= m - 1 {
			pID, pConsumer = append(pID, a.id), append(pConsumer, r.cons.names[bits.TrailingZeros64(m)])
		}
		for _, ci := range a.deliveredMore {
			pID, pConsumer = append(pID, a.id), append(pConsumer, r.cons.names[ci])
		}
		ids[i], parts[i], attempts[i], outcome[i], lastErr[i], delay[i] = a.id, a.part, int32(a.attempts), a.outcome, a.lastError, a.delay.Milliseconds()
		newAttempts[i] = int32(a.newAttempts)
		if a.hadRows {
			hadRows = append(hadRows, a.id)
		}
		for _, d := range a.rows {
			dID = append(dID, a.id)
			dConsumer = append(dConsumer, d.consumer)
			dState = append(dState, d.state)
			dAttempts = append(dAttempts, int32(d.attempts))
			dErr = append(dErr, d.lastError)
			dDelay = append(dDelay, d.delay.Milliseconds())
		}
	}
	// The same pairs counted per consumer, for ackHeldSQL.
	perConsumer := map[string]int64{}
	for _, c := range pConsumer {
		perConsumer[c]++
	}
	heldConsumers, heldCounts := make([]string, 0, len(perConsumer)), make([]int64, 0, len(perConsumer))
	for c, n := range perConsumer {
		heldConsumers, heldCounts = append(heldConsumers, c), append(heldCounts, n)
	}
	// Empty, not nil: unnest of a NULL array is fine, but = ANY of NULL is
	// unknown; keep every array typed and present.
	return ackArgs{
		all: []any{r.cfg.InstanceID, c.parts, c.epochs, ids, parts, attempts, outcome, lastErr, delay, newAttempts,
			nonNil(dID), nonNil(dConsumer), nonNil(dState), nonNil(dAttempts), nonNil(dErr), nonNil(dDelay), nonNil(hadRows),
			nonNil(pID), nonNil(pConsumer)},
		held: []any{r.cfg.InstanceID, c.parts, c.epochs, ids, heldConsumers, heldCounts},
	}
}

// ackArgs are the arguments of ackSQL (all) and ackHeldSQL (held).
type ackArgs struct{ all, held []any }

// passable reports that an ack row records its event as dispatched or
// skipped and nothing else: the next events of its aggregate may be
// claimed before the ack commits (see unacked).
func passable(a ackRow) bool {
	return (a.outcome == "dispatched" || a.outcome == "skipped") && a.lastError == "" && !a.hadRows && len(a.rows) == 0
}

// dispatchedOnly reports that every outcome is dispatched, without an
// error to record or attempts to count, and that no event had delivery
// rows: ackHeldSQL writes them while the claimed partitions are held.
func dispatchedOnly(acks []ackRow) bool {
	for _, a := range acks {
		if a.outcome != "dispatched" || !passable(a) || a.newAttempts != a.attempts {
			return false
		}
	}
	return true
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func (r *Relay) countFenced(c claimable, n int, affected int64, bs *BatchStats) {
	if fenced := n - int(affected); fenced > 0 {
		bs.Fenced = fenced
		r.leases.doubt(c)
		r.cfg.Logger.Warn("relay: outcomes not recorded: partition lease lost (the new owner delivers these events again)",
			"events", fenced, "batch", n)
	}
}

// ack writes the outcomes in one statement (two when a lean batch's claimed
// partitions are not all held any more), retrying while the database is
// away for as long as the leases can still be valid. The statements only
// apply to rows that are still pending (ackSQL: with the attempts they were
// claimed with), so a retry after an ack whose reply was lost changes
// nothing twice.
func (r *Relay) ack(ctx context.Context, c claimable, acks []ackRow, bs *BatchStats) error {
	if len(acks) == 0 {
		return nil
	}
	n := len(acks)
	args := r.ackArgs(c, acks)
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.LeaseTTL)
	defer cancel()
	bo := newWaitBackoff()
	// affected counts the rows every statement that succeeded changed: a
	// retry after an error repeats only the statements that failed.
	var affected int64
	heldDone := !dispatchedOnly(acks)
	for {
		var err error
		if !heldDone {
			// Every claimed partition still held: the ids alone
			// (instance, lease partitions and epochs, ids).
			var k int64
			if k, err = r.ackExec(actx, r.q.ackHeld, args.held); err == nil {
				affected, heldDone = affected+k, true
			}
		}
		if err == nil && affected < int64(n) {
			// Not a lean batch, or a partition was lost (or rows were acked
			// before): partition by partition.
			var k int64
			if k, err = r.ackExec(actx, r.q.ack, args.all); err == nil {
				affected += k
			}
		}
		if err == nil {
			r.countFenced(c, n, affected, bs)
			return nil
		}
		d := bo.NextBackOff()
		if actx.Err() != nil || time.Now().Add(d).After(deadline(actx)) {
			return fmt.Errorf("relay: ack %d outcomes (they will be delivered again): %w", n, err)
		}
		r.cfg.Logger.Warn("relay: ack failed; retrying", "error", err, "retry_in", d.Round(time.Millisecond))
		select {
		case <-actx.Done():
		case <-time.After(d):
		}
	}
}

// ackExec runs one ack statement without JIT and returns how many outbox
// rows it changed (the count it returns).
func (r *Relay) ackExec(ctx context.Context, q string, args []any) (int64, error) {
	b := withoutJIT(q, args...)
	if r.wm != nil {
		// The ack's own transaction id, before its UPDATE runs: the
		// watermark does not wait for it (an ack takes no outbox id).
		b.QueuedQueries[0].SQL = "SELECT set_config('jit', 'off', true), pg_current_xact_id()::text::bigint"
	}
	br, release, err := r.sendBatch(ctx, b)
	if err != nil {
		return 0, err
	}
	defer release()
	var affected int64
	if r.wm != nil {
		var xid int64
		if err = br.QueryRow().Scan(nil, &xid); err == nil {
			r.wm.own(uint64(xid))
			defer r.wm.disown(uint64(xid))
		}
	} else {
		_, err = br.Exec()
	}
	if err == nil {
		err = br.QueryRow().Scan(&affected)
	}
	return affected, errors.Join(err, br.Close())
}

func deadline(ctx context.Context) time.Time {
	d, ok := ctx.Deadline()
	if !ok {
		return time.Now().Add(time.Hour)
	}
	return d
}
