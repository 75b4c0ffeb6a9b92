package search

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/linked"
	"github.com/searchsync/searchsync/mapping"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/projections"
)

// linkedBatch gathers the steps of a batch on documents of linked indexes
// (those that relations reach), in event order per document.
type linkedBatch struct {
	docs  []*linkedDoc
	byKey map[docKey]*linkedDoc
}

type linkedDoc struct {
	def   *mapping.Def
	alias string
	id    string
	index string
	steps []*projections.Result
	evs   []int // the event of each step
}

func (b *linkedBatch) add(ev int, def *mapping.Def, alias string, res *projections.Result) {
	if b.byKey == nil {
		b.byKey = map[docKey]*linkedDoc{}
	}
	k := docKey{alias, res.ID}
	d := b.byKey[k]
	if d == nil {
		d = &linkedDoc{def: def, alias: alias, id: res.ID, index: res.Index}
		b.byKey[k] = d
		b.docs = append(b.docs, d)
	}
	d.steps = append(d.steps, res)
	d.evs = append(d.evs, ev)
}

// DefaultLinkedRound is Config.LinkedRound's default.
const DefaultLinkedRound = 1000

// writeLinked writes the batch's linked documents in rounds of at most
// about Config.LinkedRound documents, whole events per round in event order: an
// event's documents (an item and the backref it is copied under) are
// read, folded and written in one round, and the events of an aggregate
// after one that was not delivered are not attempted in a later round.
func (c *Consumer) writeLinked(ctx context.Context, events []*outbox.Event, b *linkedBatch, out []delivery.Outcome) {
	if len(b.docs) == 0 {
		return
	}
	type ref struct {
		ld *linkedDoc
		i  int
	}
	byEv := map[int][]ref{}
	var evs []int
	for _, ld := range b.docs {
		for i, ev := range ld.evs {
			if byEv[ev] == nil {
				evs = append(evs, ev)
			}
			byEv[ev] = append(byEv[ev], ref{ld, i})
		}
	}
	slices.Sort(evs)
	stopped := map[aggregateKey]bool{}
	for start := 0; start < len(evs); {
		subs := map[*linkedDoc]*linkedDoc{}
		var round []*linkedDoc
		end := start
		for ; end < len(evs) && (end == start || len(round) < c.cfg.LinkedRound); end++ {
			ev := evs[end]
			if key, ok := aggregateOf(events[ev]); ok && stopped[key] {
				continue // after an event of its aggregate that was not delivered
			}
			for _, r := range byEv[ev] {
				sub := subs[r.ld]
				if sub == nil {
					sub = &linkedDoc{def: r.ld.def, alias: r.ld.alias, id: r.ld.id, index: r.ld.index}
					subs[r.ld] = sub
					round = append(round, sub)
				}
				sub.steps = append(sub.steps, r.ld.steps[r.i])
				sub.evs = append(sub.evs, ev)
			}
		}
		c.writeLinkedRound(ctx, round, out)
		for _, ev := range evs[start:end] {
			if key, ok := aggregateOf(events[ev]); ok && !out[ev].Kind.Delivered() {
				stopped[key] = true
			}
		}
		start = end
	}
}

// writeLinkedRound writes linked documents through the linked writer, to
// the alias and to the targets of a running reindex of it, and gives each
// event the worst outcome of the documents it reached (an event of a
// relation reaches up to four).
func (c *Consumer) writeLinkedRound(ctx context.Context, lds []*linkedDoc, out []delivery.Outcome) {
	var docs []*linked.Doc
	var owner []*linkedDoc
	var dual []bool
	set := map[int]bool{}
	give := func(ev int, o delivery.Outcome) {
		if set[ev] {
			out[ev] = worse(out[ev], o)
			return
		}
		set[ev] = true
		out[ev] = o
	}
	for _, ld := range lds {
		var extra []string
		if c.cfg.DualWrites != nil {
			x, err := c.cfg.DualWrites.For(ctx, ld.alias)
			if err != nil {
				o := delivery.Unavailablef("look up reindex targets of %s: %v", ld.alias, err)
				for _, ev := range ld.evs {
					give(ev, o)
				}
				continue
			}
			extra = x
		}
		rules := ld.def.FoldRules()
		live := &linked.Doc{Index: ld.index, Target: ld.alias, RequireAlias: true, ID: ld.id, Rules: rules, Steps: ld.steps}
		docs = append(docs, live)
		owner = append(owner, ld)
		dual = append(dual, false)
		for _, x := range extra {
			docs = append(docs, &linked.Doc{Index: ld.index, Target: x, ID: ld.id, Rules: rules, Steps: ld.steps, Fallback: live})
			owner = append(owner, ld)
			dual = append(dual, true)
		}
	}
	c.stats.writes.Add(int64(len(docs)))
	c.linkedW.Write(ctx, docs)
	for j, d := range docs {
		ld := owner[j]
		o := d.Outcome
		if o.Kind == delivery.Unavailable && !dual[j] && ctx.Err() == nil && isMissing(o.Reason) {
			o = c.missing(ld.alias, o.Reason)
		}
		if dual[j] && o.Kind == delivery.Poison {
			if err := c.cfg.DualWrites.Rejected(ctx, ld.alias, d.Target, o.Reason); err != nil {
				o = delivery.Unavailablef("reindex target %s rejected the write (%s) and the reindex could not be failed: %v", d.Target, o.Reason, err)
			} else {
				c.logger.Warn("reindex target rejected a live write; the reindex fails", "alias", ld.alias, "target", d.Target, "reason", o.Reason)
				continue
			}
		}
		if o.Kind == delivery.Poison && !dual[j] && len(ld.steps) > 1 {
			c.blamePoison(ctx, d, ld, give)
			continue
		}
		first := true
		for i, ev := range ld.evs {
			switch {
			case d.Stale[i] && o.Kind.Delivered():
				give(ev, delivery.Outcome{Kind: delivery.Stale, Reason: fmt.Sprintf("%s/%s: the document already holds %s", d.Target, d.ID, what(ld.steps[i]))})
			case o.Kind.Delivered() || first:
				give(ev, o)
				first = false
			default:
				give(ev, delivery.Outcome{}) // after the failing one: not attempted
			}
		}
	}
}

// blamePoison finds the step of a linked document whose write the engine
// rejects for good: the steps are written again one more at a time (each
// write folds them all; the ones written before change nothing), so that
// the events before it are delivered, it gets the engine's reason, and the
// later ones are not attempted.
func (c *Consumer) blamePoison(ctx context.Context, d *linked.Doc, ld *linkedDoc, give func(int, delivery.Outcome)) {
	for k := 1; k <= len(ld.steps); k++ {
		nd := &linked.Doc{Index: d.Index, Target: d.Target, RequireAlias: d.RequireAlias, ID: d.ID, Rules: d.Rules, Steps: ld.steps[:k]}
		c.linkedW.Write(ctx, []*linked.Doc{nd})
		if !nd.Outcome.Kind.Delivered() {
			for i, ev := range ld.evs {
				switch {
				case i < k-1:
					give(ev, delivery.Ok())
				case i == k-1:
					give(ev, nd.Outcome)
				default:
					give(ev, delivery.Outcome{})
				}
			}
			return
		}
	}
	for _, ev := range ld.evs { // each step alone was taken
		give(ev, delivery.Ok())
	}
}

// what names the source version a step brings.
func what(r *projections.Result) string {
	if r.Link == nil {
		return fmt.Sprintf("version %d of the entity or a newer one", r.Version)
	}
	return fmt.Sprintf("version %d of relation %s or a newer one", r.Version, r.Link.Relation)
}

// isMissing reports an outcome about an index that does not exist.
func isMissing(reason string) bool { return strings.Contains(reason, "index_not_found_exception") }

// newLinked makes the linked writer of the consumer's linked indexes and
// checks what they need: shared tenancy (a relation's documents are found
// by id across the index), and every index whose fields an item copies
// written by this consumer too (its documents hold the backrefs).
func (c *Consumer) newLinked() error {
	c.linked = map[string]bool{}
	for _, ix := range c.indexes {
		if !c.cfg.Projections.Linked(ix) {
			continue
		}
		c.linked[ix] = true
		if d := c.cfg.Defs[ix]; d.Tenancy.Mode == mapping.TenancyPerTenant {
			return fmt.Errorf("index %s: relations reach it, which needs tenancy mode shared (one index for every tenant); it is per tenant", ix)
		}
	}
	for _, r := range c.cfg.Projections.Relations() {
		for _, pair := range [][2]*projections.Endpoint{{&r.Source, &r.Target}, {&r.Target, &r.Source}} {
			me, other := pair[0], pair[1]
			if me.Field == "" || !c.linked[me.Index] {
				continue
			}
			if len(me.OtherFields) > 0 && !c.linked[other.Index] {
				return fmt.Errorf("relation %s: the items in %s.%s copy fields of index %s, which this consumer does not write (add it to the consumer's indexes)",
					r.Name, me.Index, me.Field, other.Index)
			}
		}
	}
	var targets func(context.Context, string) ([]string, error)
	if c.cfg.DualWrites != nil {
		targets = c.cfg.DualWrites.For
	}
	w, err := linked.New(linked.Config{Engine: c.cfg.Engine, Writer: c.writer, Projections: c.cfg.Projections,
		Rules: func(ix string) projections.Rules {
			if d := c.cfg.Defs[ix]; d != nil {
				return d.FoldRules()
			}
			return projections.Rules{}
		},
		Targets: targets, MaxFanOut: c.cfg.MaxFanOut, RequestTimeout: c.cfg.RequestTimeout, Logger: c.logger})
	c.linkedW = w
	return err
}

// LinkedStats returns the counters of the linked writer (the documents
// relations reach).
func (c *Consumer) LinkedStats() linked.Stats { return c.linkedW.Stats() }
