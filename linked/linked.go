// Package linked writes the documents of linked indexes: the indexes that
// relations reach (projections.Set.Linked), whose documents are written
// from several aggregates at once, the entity's own and each relation that
// touches it, with versions of separate sequences.
//
// One external version cannot guard such a document, so each source keeps
// its version inside it (projections.LinkedFold) and the write is
// conditioned on the document's sequence number instead: read (_mget with
// _seq_no and _primary_term), fold the steps onto what was read, write with
// if_seq_no/if_primary_term (create where there was none), and on a
// conflict, another writer having come first, read, fold and write again.
// A fold that changes nothing is not written, so a redelivery or a replay
// leaves the document as it is, byte for byte and at the same sequence
// number.
//
// Fan-out: an item that copies fields of the other endpoint's document
// (projections.Endpoint.OtherFields) records a backref in that document,
// written in the same round. When an entity's copied fields change, every
// document its backrefs name gets the new copy (a LinkOther step), at most
// Config.MaxFanOut per document and write; the rest is counted and logged
// (docs/relations.md, "Propagation").
//
// The search consumer (sink/search) writes its linked documents through a
// Writer, and so does the reindex replay: one fold, one write path.
package linked

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/projections"
)

// Config configures a Writer.
type Config struct {
	// Engine reads the documents. Required.
	Engine indexer.Engine
	// Writer sends the writes. Required.
	Writer *indexer.Writer
	// Projections declare the relations. Required.
	Projections *projections.Set
	// Rules are the fold rules of an index's documents (its definition's).
	// Required.
	Rules func(index string) projections.Rules
	// Targets, when set, names the extra physical indexes a fan-out to an
	// alias is written to as well (a running reindex's targets).
	Targets func(ctx context.Context, alias string) ([]string, error)
	// MaxAttempts bounds the read-fold-write rounds of a document that
	// other writers keep changing; after them its steps are Retry.
	// Default 10.
	MaxAttempts int
	// MaxFanOut bounds the documents one write of an entity brings a new
	// copy of its fields to. Default 1000.
	MaxFanOut int
	// NoFanOut leaves the fan-out out (a reindex's replay: the live
	// writes bring the copies to its target).
	NoFanOut bool
	// RequestTimeout bounds each _mget. Default 30s.
	RequestTimeout time.Duration
	// Logger. Default: discard.
	Logger *slog.Logger
}

// Stats are counters since the Writer was made.
type Stats struct {
	Reads      int64 // documents read
	Writes     int64 // documents written
	Unchanged  int64 // documents whose fold changed nothing (not written)
	Conflicts  int64 // guarded writes refused because another writer came first
	FanOut     int64 // documents brought a new copy of another entity's fields
	FanOutSkip int64 // fan-out documents left out beyond MaxFanOut
}

// Writer folds and writes linked documents.
type Writer struct {
	cfg   Config
	log   *slog.Logger
	stats struct{ reads, writes, unchanged, conflicts, fanOut, fanOutSkip atomic.Int64 }
}

// New returns a Writer.
func New(cfg Config) (*Writer, error) {
	if cfg.Engine == nil || cfg.Writer == nil || cfg.Projections == nil || cfg.Rules == nil {
		return nil, errors.New("linked: needs an engine, a writer, projections and rules")
	}
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, 10)
	cfg.MaxFanOut = cmp.Or(cfg.MaxFanOut, 1000)
	cfg.RequestTimeout = cmp.Or(cfg.RequestTimeout, 30*time.Second)
	w := &Writer{cfg: cfg, log: cfg.Logger}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	return w, nil
}

// Stats returns a snapshot of the counters.
func (w *Writer) Stats() Stats {
	s := &w.stats
	return Stats{Reads: s.reads.Load(), Writes: s.writes.Load(), Unchanged: s.unchanged.Load(), Conflicts: s.conflicts.Load(),
		FanOut: s.fanOut.Load(), FanOutSkip: s.fanOutSkip.Load()}
}

// Doc is one document to fold and write, and what became of it.
type Doc struct {
	// Index is the alias of the document's definition (Result.Index).
	Index string
	// Target is where it is read and written: the alias (or per-tenant
	// alias) with RequireAlias, or a physical index (a reindex's target).
	Target       string
	RequireAlias bool
	ID           string
	Rules        projections.Rules
	// Steps are folded in order.
	Steps []*projections.Result
	// Fallback, for a write to a reindex's target, is the same document's
	// write to the live alias (in the same Write): where the target does
	// not hold the document yet, the steps are folded onto the live
	// document as read, as the non-linked dual writes do, so that the
	// target never holds a document built from the new steps alone.
	Fallback *Doc

	// Outcome is the write's (OK also when nothing changed); Stale marks
	// the steps that changed nothing because their source had already
	// applied them.
	Outcome delivery.Outcome
	Stale   []bool
	// Written reports that the document was written.
	Written bool

	done bool // Outcome is final
	// read state
	found         bool
	source        []byte
	doc           map[string]any
	seqNo, term   int64
	engineVersion int64
	fold          *projections.LinkedFold
	attempt       int
	// what other documents copy from the read state, and the entity's
	// version, folded once per read (shown)
	shownDoc map[string]any
	shownV   int64
	shownOK  bool
}

// Write folds and writes docs, and then the fan-out of the entities whose
// copied fields changed. Each Doc's Outcome and Stale are set.
func (w *Writer) Write(ctx context.Context, docs []*Doc) {
	for _, d := range docs {
		d.Stale = make([]bool, len(d.Steps))
		d.Outcome, d.done, d.attempt = delivery.Outcome{}, false, 0
	}
	w.read(ctx, docs)
	fallBack(docs)
	others := map[[2]string]*Doc{}
	for _, d := range docs {
		if !d.done && (d.RequireAlias || d.Target == d.Index) {
			if _, ok := others[[2]string{d.Index, d.ID}]; !ok {
				others[[2]string{d.Index, d.ID}] = d
			}
		}
	}
	w.readOthers(ctx, docs, others)
	lookup := func(index, id string) (int64, map[string]any) {
		o := others[[2]string{index, id}]
		if o == nil || !o.found {
			return 0, nil
		}
		return w.shown(o)
	}
	todo := slices.Clone(docs)
	var fan []*fanOut
	for len(todo) > 0 {
		var ops []indexer.BulkOp
		var sent []*Doc
		for _, d := range todo {
			if d.done {
				continue
			}
			op, err := w.fold(d, lookup)
			if err != nil {
				d.settle(delivery.Retryf("document %s/%s: %v", d.Target, d.ID, err))
				continue
			}
			if op == nil {
				d.settle(delivery.Ok())
				w.stats.unchanged.Add(1)
				fan = append(fan, w.fanOutOf(d)...)
				continue
			}
			ops = append(ops, *op)
			sent = append(sent, d)
		}
		todo = nil
		if len(ops) == 0 {
			break
		}
		results := w.cfg.Writer.Write(ctx, ops)
		var again []*Doc
		for i, r := range results {
			d := sent[i]
			switch {
			case r.Result.Conflict():
				w.stats.conflicts.Add(1)
				d.attempt++
				if d.attempt >= w.cfg.MaxAttempts {
					d.settle(delivery.Retryf("document %s/%s changed under %d writes in a row (other writers): %s", d.Target, d.ID, d.attempt, r.Reason))
					continue
				}
				again = append(again, d)
			case r.Kind == delivery.OK:
				w.stats.writes.Add(1)
				d.settle(r.Outcome)
				d.Written = true
				fan = append(fan, w.fanOutOf(d)...)
			default:
				d.settle(r.Outcome)
			}
		}
		if len(again) > 0 {
			w.read(ctx, again)
			fallBack(again)
			todo = again
		}
	}
	if len(fan) > 0 && !w.cfg.NoFanOut {
		w.fanOut(ctx, docs, fan)
	}
}

// readOthers reads the other endpoints whose fields items copy and that
// docs do not hold (their documents are not written in this call: a
// reindex of one index), from their aliases.
func (w *Writer) readOthers(ctx context.Context, docs []*Doc, others map[[2]string]*Doc) {
	need := map[string][]*Doc{}
	var indexes []string
	for _, d := range docs {
		if d.done {
			continue
		}
		for _, s := range d.Steps {
			l := s.Link
			if l == nil || l.Kind != projections.LinkItem || len(l.Endpoint.OtherFields) == 0 {
				continue
			}
			k := [2]string{l.OtherIndex, l.OtherID}
			if others[k] != nil {
				continue
			}
			o := &Doc{Index: l.OtherIndex, Target: l.OtherIndex, ID: l.OtherID, Rules: w.cfg.Rules(l.OtherIndex)}
			others[k] = o
			if need[l.OtherIndex] == nil {
				indexes = append(indexes, l.OtherIndex)
			}
			need[l.OtherIndex] = append(need[l.OtherIndex], o)
		}
	}
	for _, ix := range indexes {
		w.read(ctx, need[ix])
		for _, o := range need[ix] {
			if o.done && !o.Outcome.Kind.Delivered() {
				// Unreadable: the documents that copy its fields wait.
				for _, d := range docs {
					for _, s := range d.Steps {
						if s.Link != nil && s.Link.OtherIndex == o.Index && s.Link.OtherID == o.ID && !d.done {
							d.settle(o.Outcome)
						}
					}
				}
			}
		}
	}
}

// read fetches the current state of docs, one _mget per target.
func (w *Writer) read(ctx context.Context, docs []*Doc) {
	byTarget := map[string][]*Doc{}
	var targets []string
	for _, d := range docs {
		if byTarget[d.Target] == nil {
			targets = append(targets, d.Target)
		}
		byTarget[d.Target] = append(byTarget[d.Target], d)
	}
	for _, t := range targets {
		ds := byTarget[t]
		ids := make([]string, 0, len(ds))
		for _, d := range ds {
			if !slices.Contains(ids, d.ID) {
				ids = append(ids, d.ID)
			}
		}
		var got map[string]indexer.Doc
		rctx, cancel := context.WithTimeout(ctx, w.cfg.RequestTimeout)
		got, err := w.cfg.Engine.MGet(rctx, t, ids)
		cancel()
		w.stats.reads.Add(int64(len(ids)))
		for _, d := range ds {
			if err != nil {
				if ctx.Err() != nil {
					d.settle(delivery.Outcome{}) // cancelled: not attempted
				} else {
					d.settle(readFailed(t, err))
				}
				continue
			}
			g, ok := got[d.ID]
			d.found, d.source, d.doc, d.shownOK = ok, nil, nil, false
			if !ok {
				continue
			}
			m, derr := projections.Decode(g.Source)
			if derr != nil {
				d.settle(delivery.Retryf("current document %s/%s is not a JSON object: %v", t, d.ID, derr))
				continue
			}
			d.source, d.doc, d.seqNo, d.term, d.engineVersion = g.Source, m, g.SeqNo, g.PrimaryTerm, g.Version
		}
	}
}

// fallBack gives the documents a target lacks their Fallback's state.
func fallBack(docs []*Doc) {
	for _, d := range docs {
		if f := d.Fallback; f != nil && !d.done && !d.found && f.found {
			d.doc, d.source, d.engineVersion = f.doc, f.source, f.engineVersion
		}
	}
}

// readFailed is the outcome of a failed read: the engine's, not the event's.
func readFailed(target string, err error) delivery.Outcome {
	if indexer.IsIndexNotFound(err) {
		return delivery.Unavailablef("index %s missing: %v", target, err)
	}
	return delivery.Unavailablef("read current documents of %s: %v", target, err)
}

// fold folds d's steps onto its read state and returns the write, nil when
// the document stays as it is.
func (w *Writer) fold(d *Doc, others func(index, id string) (int64, map[string]any)) (*indexer.BulkOp, error) {
	f, err := projections.NewLinkedFold(d.Rules, w.cfg.Projections.RelationFields(d.Index), d.doc, d.engineVersion, others)
	if err != nil {
		return nil, err
	}
	for i, s := range d.Steps {
		d.Stale[i] = f.Apply(s) == projections.Stale
	}
	d.fold = f
	doc := f.Doc()
	b, err := projections.Encode(doc)
	if err != nil {
		return nil, fmt.Errorf("does not encode: %w", err)
	}
	if d.found {
		// A document read as the fold writes it is unchanged, without
		// encoding what was read.
		if bytes.Equal(d.source, b) {
			return nil, nil
		}
		if old, err := projections.Encode(d.doc); err == nil && bytes.Equal(old, b) {
			return nil, nil
		}
	}
	_, v := f.EntityDoc()
	return &indexer.BulkOp{Type: indexer.OpIndex, Index: d.Target, ID: d.ID, Version: v, RequireAlias: d.RequireAlias, Doc: b, Compact: true,
		Guarded: true, Create: !d.found, IfSeqNo: d.seqNo, IfPrimaryTerm: d.term}, nil
}

// fanOut is a new copy of an entity's fields for one receiving document.
type fanOut struct {
	to      projections.Backref
	from    string // the entity's id
	version int64
	values  map[string]any
}

// fanOutOf returns the copies d's entity sends to the documents its
// backrefs name: every live backref when d's copied fields changed from
// what was read, or when the entity's step was not new (a redelivery: the
// first delivery may have failed before its fan-out), or when d was
// written after a conflict (the items written beside it may hold the copy
// of the state read first).
func (w *Writer) fanOutOf(d *Doc) []*fanOut {
	f := d.fold
	if f == nil {
		return nil
	}
	entitySteps, backrefSteps, stale := false, false, false
	for i, s := range d.Steps {
		switch {
		case s.Op == projections.OpIgnore:
		case s.Link == nil:
			entitySteps = true
			stale = stale || d.Stale[i]
		case s.Link.Kind == projections.LinkBackref:
			backrefSteps = true
		}
	}
	var refs []projections.Backref
	switch {
	case entitySteps:
		refs = f.LiveBackrefs()
	case backrefSteps && d.attempt > 0:
		refs = f.LiveBackrefs(f.Backrefs...)
	}
	if len(refs) == 0 {
		return nil
	}
	doc := f.Shown()
	_, v := f.EntityDoc()
	var before map[string]any
	if d.found {
		_, before = w.shown(d)
	}
	var out []*fanOut
	for _, b := range refs {
		ep := w.cfg.Projections.Endpoint(b.Index, b.Field)
		if ep == nil {
			continue
		}
		now := ep.OtherValues(doc)
		if !stale && d.attempt == 0 && projections.SameDocument(now, ep.OtherValues(before)) {
			continue
		}
		out = append(out, &fanOut{to: b, from: d.ID, version: v, values: now})
	}
	if len(out) > w.cfg.MaxFanOut {
		skipped := len(out) - w.cfg.MaxFanOut
		w.stats.fanOutSkip.Add(int64(skipped))
		w.log.Warn("relation fan-out bounded: documents keep an older copy of the entity's fields until a reindex",
			"index", d.Index, "id", d.ID, "documents", len(out), "max_fan_out", w.cfg.MaxFanOut, "skipped", skipped)
		out = out[:w.cfg.MaxFanOut]
	}
	return out
}

// shown returns the version of the entity in d's read state and what other
// documents copy from it (projections.LinkedFold.Shown; 0, nil when the
// state does not fold), folded once per read: the items of a batch's
// relation events look up the same other endpoint again and again, and its
// fan-out what it was before.
func (w *Writer) shown(d *Doc) (int64, map[string]any) {
	if !d.shownOK {
		d.shownV, d.shownDoc, d.shownOK = 0, nil, true
		if f, err := projections.NewLinkedFold(d.Rules, w.cfg.Projections.RelationFields(d.Index), d.doc, d.engineVersion, nil); err == nil {
			_, d.shownV = f.EntityDoc()
			d.shownDoc = f.Shown()
		}
	}
	return d.shownV, d.shownDoc
}

// fanOut writes the copies to their documents (and to the reindex targets
// of their aliases). A copy that cannot be written makes the documents of
// its entity Retry, so that their events come again and fan out again.
func (w *Writer) fanOut(ctx context.Context, docs []*Doc, fan []*fanOut) {
	var out []*Doc
	source := map[*Doc]string{}
	for _, fo := range fan {
		res := &projections.Result{Op: projections.OpIndex, Index: fo.to.Index, ID: fo.to.ID, Version: fo.version,
			Link: &projections.Link{Kind: projections.LinkOther, Field: fo.to.Field, OtherID: fo.from, OtherVersion: fo.version, Values: fo.values}}
		targets := []string{fo.to.Index}
		if w.cfg.Targets != nil {
			extra, err := w.cfg.Targets(ctx, fo.to.Index)
			if err != nil {
				w.failSource(docs, fo.from, delivery.Unavailablef("look up reindex targets of %s: %v", fo.to.Index, err))
				continue
			}
			targets = append(targets, extra...)
		}
		var live *Doc
		for i, t := range targets {
			d := &Doc{Index: fo.to.Index, Target: t, RequireAlias: i == 0, ID: fo.to.ID, Rules: w.cfg.Rules(fo.to.Index), Steps: []*projections.Result{res}, Fallback: live}
			if i == 0 {
				live = d
			}
			out = append(out, d)
			source[d] = fo.from
		}
	}
	if len(out) == 0 {
		return
	}
	w.stats.fanOut.Add(int64(len(out)))
	w.Write(ctx, out)
	for _, d := range out {
		if !d.Outcome.Kind.Delivered() {
			w.failSource(docs, source[d], delivery.Outcome{Kind: d.Outcome.Kind, Reason: "fan-out to " + d.Target + "/" + d.ID + ": " + d.Outcome.Reason})
		}
	}
}

// failSource gives the documents of entity id the outcome o (their events
// come again).
func (w *Writer) failSource(docs []*Doc, id string, o delivery.Outcome) {
	for _, d := range docs {
		if d.ID == id && d.Outcome.Kind.Delivered() {
			d.Outcome = o
		}
	}
}

func (d *Doc) settle(o delivery.Outcome) {
	d.Outcome, d.done = o, true
}
