package search

import (
	"context"
	"fmt"
	"runtime"
	"sync"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/projections"
)

// fold applies the steps of a document in order onto its current state
// (projections.Fold, the rules of t's definition) and returns the op that
// writes the final state (nil when nothing changes), the steps that
// contributed to it and the final state (nil for a hard delete); it marks
// the stale steps. It changes neither state nor the steps' documents: the
// final state is built copy-on-write and may share maps with both, so that
// it must not be changed in place either.
func fold(t *target, steps []step, state map[string]any, maxVersion int64) (*indexer.BulkOp, []int, map[string]any) {
	var contributed []int
	f := projections.NewFold(t.rules, state, maxVersion)
	for i := range steps {
		switch f.Apply(steps[i].res) {
		case projections.Applied:
			contributed = append(contributed, i)
		case projections.Stale:
			steps[i].stale = true
		}
	}
	kind, version, state := f.Write()
	if kind == projections.OpIgnore {
		return nil, nil, nil
	}
	op := &indexer.BulkOp{Index: t.alias, ID: t.id, Version: version, RequireAlias: true, SameVersion: f.Snapshot()}
	if kind == projections.OpDelete {
		op.Type = indexer.OpDelete
	} else {
		op.Type = indexer.OpIndex
		doc, err := projections.Encode(state)
		if err != nil {
			// Values come from decoded JSON; this cannot happen.
			panic(fmt.Sprintf("indexer: document %s/%s does not encode: %v", t.alias, t.id, err))
		}
		op.Doc, op.Compact = doc, true
	}
	return op, contributed, state
}

// pending is one document write of a round.
type pending struct {
	t           *target
	op          *indexer.BulkOp
	contributed []int          // step indexes folded into op
	state       map[string]any // the document op writes (nil: a hard delete)
	extra       []string
}

func (c *Consumer) write(ctx context.Context, order []*target, out []delivery.Outcome) {
	ops := make([]*indexer.BulkOp, len(order))
	contrib := make([][]int, len(order))
	states := make([]map[string]any, len(order))
	parallel(len(order), func(i int) {
		if t := order[i]; !t.failed {
			ops[i], contrib[i], states[i] = fold(t, t.steps, t.current, t.curVersion)
		}
	})
	writes := make([]*pending, 0, len(order))
	pendings := make([]pending, 0, len(order)) // every write's, in one allocation
	for i, t := range order {
		if t.failed {
			continue
		}
		op, contributed := ops[i], contrib[i]
		if op == nil {
			// Only ignores or stale events: nothing to write.
			for _, s := range t.steps {
				if s.stale {
					out[s.ev] = delivery.Outcome{Kind: delivery.Stale, Reason: fmt.Sprintf("%s/%s already holds version %d or newer", t.alias, t.id, s.res.Version)}
				} else {
					out[s.ev] = delivery.Ok()
				}
			}
			continue
		}
		pendings = append(pendings, pending{t: t, op: op, contributed: contributed, state: states[i]})
		writes = append(writes, &pendings[len(pendings)-1])
	}
	if c.cfg.DisableCoalescing {
		c.redoOneByOne(ctx, writes, out)
		return
	}
	results := c.send(ctx, writes)
	var redo []*pending
	for i, p := range writes {
		o := results[i]
		if o.Kind == delivery.Poison && len(p.contributed) > 1 {
			redo = append(redo, p)
			continue
		}
		c.settle(p, o, out)
	}
	if len(redo) > 0 {
		c.redoOneByOne(ctx, redo, out)
	}
}

// send writes each pending op to its alias and to the reindex targets of
// the alias, and returns one combined outcome per pending write.
func (c *Consumer) send(ctx context.Context, writes []*pending) []delivery.Outcome {
	res := make([]delivery.Outcome, len(writes))
	ops := make([]indexer.BulkOp, 0, len(writes))
	owner := make([]int, 0, len(writes))
	dual := make([]bool, 0, len(writes)) // ops[j] is a write to a reindex target
	for i, p := range writes {
		if c.cfg.DualWrites != nil {
			extra, err := c.cfg.DualWrites.For(ctx, p.t.alias)
			if err != nil {
				// The database that holds the reindex jobs: not the event's fault.
				res[i] = delivery.Unavailablef("look up reindex targets of %s: %v", p.t.alias, err)
				continue
			}
			p.extra = extra
		}
		ops = append(ops, *p.op)
		owner = append(owner, i)
		dual = append(dual, false)
		for _, x := range p.extra {
			op := *p.op
			op.Index, op.RequireAlias = x, false // a physical reindex target
			ops = append(ops, op)
			owner = append(owner, i)
			dual = append(dual, true)
		}
	}
	if len(ops) == 0 {
		return res
	}
	c.stats.writes.Add(int64(len(writes)))
	got := c.writer.Write(ctx, ops)
	seen := make([]bool, len(writes))
	for j, o := range got {
		i := owner[j]
		oc := o.Outcome
		if oc.Kind == delivery.Unavailable && o.Result.IndexNotFound() && ops[j].RequireAlias {
			oc = c.missing(ops[j].Index, o.Result.Answer())
		}
		if dual[j] && oc.Kind == delivery.Poison {
			// The new mapping of a running reindex refuses the document:
			// the reindex fails, not the live event.
			if err := c.cfg.DualWrites.Rejected(ctx, writes[i].t.alias, ops[j].Index, oc.Reason); err != nil {
				oc = delivery.Unavailablef("reindex target %s rejected the write (%s) and the reindex could not be failed: %v", ops[j].Index, oc.Reason, err)
			} else {
				c.logger.Warn("reindex target rejected a live write; the reindex fails", "alias", writes[i].t.alias, "target", ops[j].Index, "reason", oc.Reason)
				continue
			}
		}
		if !seen[i] {
			seen[i] = true
			res[i] = oc
			continue
		}
		res[i] = worse(res[i], oc)
	}
	return res
}

// worse combines the outcomes of one document written to several indexes:
// the document is delivered only when every index took it. Unavailable
// ranks above Retry (one index unavailable pauses the consumer rather than
// counting attempts) and below Poison (an event the live index rejects for
// good fails whatever a target says; a target's poison never gets here, see
// send).
func worse(a, b delivery.Outcome) delivery.Outcome {
	rank := func(k delivery.Kind) int {
		switch k {
		case delivery.OK:
			return 0
		case delivery.Stale:
			return 1
		case delivery.NotAttempted:
			return 2
		case delivery.Retry:
			return 3
		case delivery.Unavailable:
			return 4
		default:
			return 5
		}
	}
	if rank(b.Kind) > rank(a.Kind) {
		return b
	}
	if a.Kind == delivery.Stale && b.Kind == delivery.OK {
		return b // the live alias already had it; the reindex target took it
	}
	return a
}

// settle gives every event of a document the outcome of its write.
func (c *Consumer) settle(p *pending, o delivery.Outcome, out []delivery.Outcome) {
	t := p.t
	if o.Kind == delivery.OK && len(p.extra) == 0 {
		c.states.put(t.alias, t.id, p.op.Version, p.state)
	} else {
		// (While a reindex of the alias runs, nothing is cached: see
		// cacheable.)
		// Failed, or stale (the engine holds that version or a newer
		// one): what it holds is not known here.
		c.states.drop(t.alias, t.id)
	}
	if !o.Kind.Delivered() {
		c.failTarget(t, out, o)
		return
	}
	if n := len(p.contributed); n > 1 {
		c.stats.coalesced.Add(int64(n - 1))
	}
	for _, s := range t.steps {
		switch {
		case s.stale:
			out[s.ev] = delivery.Outcome{Kind: delivery.Stale, Reason: fmt.Sprintf("%s/%s: version %d is not newer than an event already applied", t.alias, t.id, s.res.Version)}
		default:
			out[s.ev] = o
		}
	}
}

// redoOneByOne writes the documents whose coalesced write was poison event
// by event: round r writes, for every such document, the state after its
// r-th contributing event with that event's version, until the document
// fails. The events before the poison one are delivered, the poison one
// gets the engine's reason, the later ones stay NotAttempted.
func (c *Consumer) redoOneByOne(ctx context.Context, redo []*pending, out []delivery.Outcome) {
	type round struct {
		op      *indexer.BulkOp
		step    int   // the contributing step written by op
		settled []int // every step (ignores, stale ones) whose outcome follows op
	}
	type chain struct {
		t      *target
		rounds []round
	}
	chains := make([]*chain, 0, len(redo))
	for _, p := range redo {
		t := p.t
		c.states.drop(t.alias, t.id) // written event by event below
		ch := &chain{t: t}
		state := t.current
		maxV := t.curVersion
		from := 0
		for _, ci := range p.contributed {
			// A step that contributed to the whole fold contributes
			// alone too: op is never nil.
			var op *indexer.BulkOp
			op, _, state = fold(t, t.steps[ci:ci+1], state, maxV)
			maxV = t.steps[ci].res.Version
			rd := round{op: op, step: ci}
			for k := from; k <= ci; k++ {
				rd.settled = append(rd.settled, k)
			}
			ch.rounds = append(ch.rounds, rd)
			from = ci + 1
		}
		last := &ch.rounds[len(ch.rounds)-1]
		for k := from; k < len(t.steps); k++ {
			last.settled = append(last.settled, k)
		}
		chains = append(chains, ch)
	}
	for r := 0; ; r++ {
		var writes []*pending
		var who []*chain
		for _, ch := range chains {
			if ch.t.failed || r >= len(ch.rounds) {
				continue
			}
			writes = append(writes, &pending{t: ch.t, op: ch.rounds[r].op})
			who = append(who, ch)
		}
		if len(writes) == 0 {
			return
		}
		results := c.send(ctx, writes)
		for i, ch := range who {
			o, rd, t := results[i], ch.rounds[r], ch.t
			for _, k := range rd.settled {
				s := t.steps[k]
				switch {
				case !o.Kind.Delivered() && k == rd.step:
					t.failed = true
					out[s.ev] = o
				case !o.Kind.Delivered() && k > rd.step:
					// after the failing event: NotAttempted
				case s.stale:
					out[s.ev] = delivery.Outcome{Kind: delivery.Stale, Reason: fmt.Sprintf("%s/%s: version %d is not newer than an event already applied", t.alias, t.id, s.res.Version)}
				case s.res.Op == projections.OpIgnore && !o.Kind.Delivered():
					out[s.ev] = delivery.Ok()
				default:
					out[s.ev] = o
				}
			}
		}
	}
}

// parallel runs fn(0..n-1) on up to GOMAXPROCS goroutines, in contiguous
// chunks; small n runs inline.
func parallel(n int, fn func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n/64)
	if workers < 2 {
		for i := range n {
			fn(i)
		}
		return
	}
	var wg sync.WaitGroup
	chunk := (n + workers - 1) / workers
	for start := 0; start < n; start += chunk {
		end := min(start+chunk, n)
		wg.Go(func() {
			for i := start; i < end; i++ {
				fn(i)
			}
		})
	}
	wg.Wait()
}
