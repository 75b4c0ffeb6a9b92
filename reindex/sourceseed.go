package reindex

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/searchsync/searchsync/backfill"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/projections"
)

// seedSourcePrefix starts Params.Seed (and --seed) for a backfill source.
const seedSourcePrefix = "source:"

// seedSpec is Params.Seed for this configuration: "" (the live index) or
// "source:<name>".
func (c *Config) seedSpec() string {
	if c.SeedSource == nil {
		return ""
	}
	return seedSourcePrefix + c.SeedSource.Name
}

// seedFlag is a Params.Seed as --seed spells it.
func seedFlag(spec string) string {
	if spec == "" {
		return "index"
	}
	return spec
}

// seedMismatch is the error of a run whose --seed differs from the one the
// running job was started with.
func seedMismatch(job int64, started, now, alias string) error {
	return fmt.Errorf("reindex: job %d was started with --seed %s, this run has --seed %s; run it with the same --seed, or `searchsync reindex abort %s` first",
		job, seedFlag(started), seedFlag(now), alias)
}

// openSource checks the seed's backfill source against the database and
// keeps its reader.
func (r *Reindexer) openSource(ctx context.Context) (*backfill.Reader, error) {
	if r.srcReader != nil {
		return r.srcReader, nil
	}
	rd, err := backfill.Open(ctx, r.cfg.Pool, *r.cfg.SeedSource)
	if err != nil {
		return nil, fmt.Errorf("reindex: seed: %w", err)
	}
	r.srcReader = rd
	return rd, nil
}

// sourceChunk is one read of the source.
type sourceChunk struct {
	rows []backfill.Row
	last string // the key of the last row
	err  error
}

// seedFromSource fills the target from the backfill source instead of the
// live index: the source's rows in key order, a chunk (Source.ChunkSize) at
// a time by keyset (Reader.Read, one statement each, no lock), each row's
// snapshot event projected as the replay projects events and folded by
// projections.Fold (apply), written with its version as external version
// through the writer of the replay. A write older than what the target
// holds (a live write of dual writes got there first) is a 409, which is
// correct. It records the versions it writes (r.seeded) and, once every
// write of a chunk and of the chunks before it finished, the chunk's last
// key (Progress.SeedKey): a resumed run reads after it.
//
// A row read before a change of its aggregate committed is older than that
// change's event, which is retained in the outbox: the replay, which runs
// after the seed, writes the event, and a live write of it after the seed
// lands on the seeded document. So a delete that raced the seed removes
// the document the seed wrote from the older read (hard deletes as soft).
func (r *Reindexer) seedFromSource(ctx context.Context) error {
	r.setPhase(PhaseSeed)
	rd, err := r.openSource(ctx)
	if err != nil {
		return err
	}
	src := rd.Source()
	total, err := rd.Count(ctx, r.cfg.Pool)
	if err != nil {
		return fmt.Errorf("reindex: seed: %w", err)
	}
	p := r.snapshot()
	after, first := "", true
	if p.SeedKey != nil {
		after, first = *p.SeedKey, false
		r.log.Info("reindex: resuming the seed from the source", "source", src.Name, "after_key", after, "docs_seeded", p.DocsSeeded)
	}
	r.update(func(p *Progress) { p.DocsTotal = total })
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	chunks := make(chan sourceChunk, 2) // read ahead of the writes
	go r.readSource(rctx, rd, after, first, chunks)
	rt := rate{start: time.Now(), n: p.DocsSeeded}
	for c := range chunks {
		if c.err != nil {
			return fmt.Errorf("reindex: seed from source %s: %w", src.Name, c.err)
		}
		ops, leftOut, err := r.sourceOps(c.rows, src.Name)
		if err != nil {
			return err
		}
		if r.hooks.beforeSeedWrite != nil {
			r.hooks.beforeSeedWrite(c.rows)
		}
		if err := r.writeAll(ctx, ops); err != nil {
			return fmt.Errorf("reindex: seed %s from source %s: %w", r.target, src.Name, err)
		}
		r.seededMu.Lock()
		for _, op := range ops {
			r.seeded[op.ID] = op.Version
		}
		r.seededMu.Unlock()
		key := c.last
		r.update(func(p *Progress) {
			p.SeedKey = &key
			p.DocsSeeded += int64(len(ops))
			p.SeedLeftOut += leftOut
			p.Rate = rt.perSecond(p.DocsSeeded)
			if done := p.DocsSeeded + p.SeedLeftOut; p.Rate > 0 && p.DocsTotal > done {
				p.ETA = (time.Duration(float64(p.DocsTotal-done)/p.Rate) * time.Second).Round(time.Second).String()
			}
		})
	}
	if err := context.Cause(ctx); err != nil {
		return err // the reader stopped because ctx ended: the seed is not done
	}
	r.update(func(p *Progress) { p.SeedDone = true; p.ETA = "" })
	p = r.snapshot()
	r.log.Info("reindex: seeded from the backfill source", "source", src.Name, "docs", p.DocsSeeded, "left_out", p.SeedLeftOut)
	return r.saveProgress(ctx)
}

// readSource reads the source after after (first: from its start) into
// out, a chunk at a time, at most Source.Rate rows a second, until a chunk
// is short, a read fails or ctx ends; it closes out.
func (r *Reindexer) readSource(ctx context.Context, rd *backfill.Reader, after string, first bool, out chan<- sourceChunk) {
	defer close(out)
	src := rd.Source()
	start, n := time.Now(), 0
	for {
		rows, err := rd.Read(ctx, r.cfg.Pool, after, first, src.ChunkSize)
		if err == nil && len(rows) == 0 {
			return
		}
		c := sourceChunk{rows: rows, err: err}
		if err == nil {
			after, first = rows[len(rows)-1].Key, false
			c.last = after
		}
		select {
		case out <- c:
		case <-ctx.Done():
			return
		}
		if err != nil || len(rows) < src.ChunkSize {
			return
		}
		n += len(rows)
		if src.Rate > 0 {
			due := start.Add(time.Duration(float64(n) / src.Rate * float64(time.Second)))
			if sleep(ctx, time.Until(due)) != nil {
				return
			}
		}
	}
}

// sourceOps projects the rows of a chunk (projections.Project, then the
// fold of the replay, apply) and returns their writes and how many rows
// gave no document of the alias. A row the projection rejects, one whose
// event type the alias's search consumers do not take, and one projected
// as a partial update (no state to merge onto) fail the seed with the
// row's key.
func (r *Reindexer) sourceOps(rows []backfill.Row, source string) ([]indexer.BulkOp, int64, error) {
	var (
		order   []string
		leftOut int64
	)
	steps := map[string][]*projections.Result{}
	bad := func(row *backfill.Row, format string, args ...any) error {
		return fmt.Errorf("reindex: seed: %w", &backfill.RowError{Source: source, Key: row.Key, Reason: fmt.Sprintf(format, args...)})
	}
	for i := range rows {
		row := &rows[i]
		e := &row.Event
		if r.cfg.Wants != nil && !r.cfg.Wants(e.EventType, e.AggregateType) {
			return nil, 0, bad(row, "the search consumers of %s do not take %s events of %s (their routes), so the live index would not get them either",
				r.cfg.Def.Alias, e.EventType, e.AggregateType)
		}
		res, err := r.cfg.Projections.Project(e, []string{r.cfg.Def.Alias}, r.versionPath)
		if err != nil {
			return nil, 0, bad(row, "the projection rejects it: %s", err.Error())
		}
		if !r.wants(res) {
			leftOut++ // another index or tenant, an ignored event type
			continue
		}
		if res.Op == projections.OpIndex && res.Partial {
			return nil, 0, bad(row, "projection %s reads %s as a partial update; a seed needs the whole state (full_state_on, default [\"*.created\", \"*.snapshot\"])",
				res.Projection, e.EventType)
		}
		if _, ok := steps[res.ID]; !ok {
			order = append(order, res.ID)
		}
		steps[res.ID] = append(steps[res.ID], res)
	}
	ops := make([]indexer.BulkOp, 0, len(order))
	for _, id := range order {
		op, ok, err := r.apply(id, &docState{}, steps[id])
		if err != nil {
			return nil, 0, err
		}
		if ok {
			ops = append(ops, op)
		}
	}
	return ops, leftOut, nil
}

// writeAll sends ops in parts of BulkSize, Concurrency at once, and
// returns when all are written (or stale).
func (r *Reindexer) writeAll(ctx context.Context, ops []indexer.BulkOp) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(r.cfg.Concurrency)
	for len(ops) > 0 {
		part := ops[:min(len(ops), r.cfg.BulkSize)]
		ops = ops[len(part):]
		g.Go(func() error { return r.w.bulk(gctx, part) })
	}
	return g.Wait()
}

// verifySource is the completeness check of a seed from a backfill source.
// The live index is no reference then (it may lack documents the source
// has: that is why the seed reads the source), so it compares counts with
// the source:
//
//	want: the rows the source query yields now (count(*)), less the rows the
//	      seed read that gave no document of the alias (Progress.SeedLeftOut);
//	got:  the target's documents through the alias filter (tombstones
//	      hidden), after a refresh.
//
// Both are read together; while they differ, both are read again (up to
// 10 times, 300 ms apart): a row committed whose event the live consumers
// have not delivered yet, or a delete in flight, makes them differ for a
// moment. A difference that persists fails the check.
func (r *Reindexer) verifySource(ctx context.Context, target string) (*Report, error) {
	start := time.Now()
	rd, err := r.openSource(ctx)
	if err != nil {
		return nil, err
	}
	leftOut := r.snapshot().SeedLeftOut
	rep := &Report{Source: seedSourcePrefix + rd.Source().Name, Target: target, SeedSource: rd.Source().Name, SourceLeftOut: leftOut}
	for attempt := 0; attempt < 10; attempt++ {
		if attempt > 0 {
			r.log.Debug("reindex: check: counts differ, looking again", "source_rows", rep.SourceRows, "want", rep.OldTotal, "target", rep.NewTotal, "attempt", attempt)
			if err := sleep(ctx, 300*time.Millisecond); err != nil {
				return nil, err
			}
		}
		if err := r.refresh(ctx, target); err != nil {
			return nil, err
		}
		g, gctx := errgroup.WithContext(ctx)
		g.Go(func() (err error) {
			rep.SourceRows, err = rd.Count(gctx, r.cfg.Pool)
			return err
		})
		g.Go(func() (err error) {
			if rep.NewTotal, err = r.cfg.Engine.Count(gctx, target, r.searchQuery()); err != nil {
				err = fmt.Errorf("reindex: check: count %s: %w", target, err)
			}
			return err
		})
		if err := g.Wait(); err != nil {
			return nil, err
		}
		rep.OldTotal = rep.SourceRows - leftOut
		if rep.OldTotal == rep.NewTotal {
			break
		}
	}
	rep.Compared = rep.NewTotal
	rep.OK = rep.OldTotal == rep.NewTotal
	rep.Seconds = time.Since(start).Seconds()
	return rep, nil
}

// searchQuery is the alias filter as a count body (nil: none).
func (r *Reindexer) searchQuery() json.RawMessage {
	f := r.cfg.Def.SearchFilter()
	if f == nil {
		return nil
	}
	return json.RawMessage(`{"query":` + strings.TrimSpace(string(f)) + `}`)
}
