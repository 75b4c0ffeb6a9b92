package reindex

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/projections"
)

// seed copies the documents of the live index to the target with their
// versions as external versions: every document, tombstones included,
// except the tombstones that no retained outbox event mentions any more
// (see compactedTombstones). It records the versions it copies (r.seeded).
func (r *Reindexer) seed(ctx context.Context, source string) error {
	r.setPhase(PhaseSeed)
	r.update(func(p *Progress) { p.DocsSeeded, p.DocsTotal = 0, 0 })
	if r.cfg.Reproject == nil && !r.cfg.ClientSeed {
		return r.seedServerSide(ctx, source)
	}
	skip, err := r.prepared(ctx, source, false)
	if err != nil {
		return err
	}
	query := r.tombstoneQuery(skip) // all documents but skip
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(r.cfg.Concurrency)
	rt := rate{start: time.Now()}
	var seeded atomic.Int64
	// Pages of two bulks: fewer scroll round trips, the same bulk size.
	err = r.adm.Scroll(gctx, source, query, 2*r.cfg.BulkSize, indexer.WholeSource, func(total int64, hits []indexer.ScrollHit) error {
		r.update(func(p *Progress) { p.DocsTotal = total })
		ops := make([]indexer.BulkOp, 0, len(hits))
		for _, h := range hits {
			doc := h.Source
			if r.cfg.Reproject != nil {
				m, err := projections.Decode(h.Source)
				if err != nil {
					return fmt.Errorf("reindex: document %s of %s: %w", h.ID, source, err)
				}
				if m, err = r.cfg.Reproject(m); err != nil {
					return fmt.Errorf("reindex: re-project document %s of %s: %w", h.ID, source, err)
				}
				if doc, err = json.Marshal(m); err != nil {
					return fmt.Errorf("reindex: document %s: %w", h.ID, err)
				}
			}
			ops = append(ops, indexer.BulkOp{Type: indexer.OpIndex, Index: r.target, ID: h.ID, Version: h.Version, Routing: h.Routing, Doc: doc})
		}
		r.seededMu.Lock()
		for _, h := range hits {
			r.seeded[h.ID] = h.Version
		}
		r.seededMu.Unlock()
		for len(ops) > 0 {
			part := ops[:min(len(ops), r.cfg.BulkSize)]
			ops = ops[len(part):]
			r.seedBulk(gctx, g, part, &seeded, &rt, total)
		}
		return nil
	})
	if gerr := g.Wait(); err == nil {
		err = gerr
	}
	if err != nil {
		return fmt.Errorf("reindex: seed %s from %s: %w", r.target, source, err)
	}
	r.update(func(p *Progress) { p.SeedDone = true })
	r.log.Info("reindex: seeded from the live index", "docs", seeded.Load(), "source", source)
	return r.saveProgress(ctx)
}

// seedServerSide copies the live documents with the engine's _reindex (no
// transfer through searchsync), sliced by Concurrency, with the bulk size
// as batch: every document but the tombstones whose events were all
// compacted. Those and the versions of the live index were looked up
// before (seedPrep, during the dual-write wait when there is one).
func (r *Reindexer) seedServerSide(ctx context.Context, source string) error {
	if t := r.snapshot().SeedTask; t != "" {
		// The copy of an interrupted run may still be going on.
		if err := r.adm.CancelTask(ctx, t); err != nil {
			r.log.Warn("reindex: cancel the seed task of the interrupted run", "task", t, "error", err.Error())
		}
	}
	skip, err := r.prepared(ctx, source, true)
	if err != nil {
		return err
	}
	query := r.tombstoneQuery(skip)
	rt := rate{start: time.Now()}
	st, err := r.copyServerSide(ctx, indexer.Copy{Source: source, Dest: r.target, Query: query, Batch: r.cfg.BulkSize, Slices: r.cfg.Concurrency}, func(task string) {
		r.update(func(p *Progress) { p.SeedTask = task })
		_ = r.saveProgress(ctx) // so that abort can cancel it
	}, func(s *indexer.TaskInfo) {
		n := s.Created + s.Updated + s.VersionConflicts
		r.update(func(p *Progress) {
			p.DocsSeeded, p.DocsTotal = n, s.Total
			p.Rate = rt.perSecond(n)
			if p.Rate > 0 && s.Total > n {
				p.ETA = (time.Duration(float64(s.Total-n)/p.Rate) * time.Second).Round(time.Second).String()
			}
		})
	})
	if st == nil {
		st = &indexer.TaskInfo{}
	}
	r.log.Debug("reindex: server-side copy done", "docs", st.Created+st.Updated, "ms", time.Since(rt.start).Milliseconds())
	if err != nil {
		return fmt.Errorf("reindex: seed %s from %s: %w", r.target, source, err)
	}
	n := st.Created + st.Updated
	r.w.stale.Add(st.VersionConflicts)
	r.update(func(p *Progress) { p.DocsSeeded = n; p.SeedDone = true; p.SeedTask = "" })
	r.log.Info("reindex: seeded from the live index (server-side _reindex)", "docs", n, "conflicts", st.VersionConflicts, "tombstones_left_out", len(skip), "source", source)
	return r.saveProgress(ctx)
}

func (r *Reindexer) seedBulk(ctx context.Context, g *errgroup.Group, ops []indexer.BulkOp, seeded *atomic.Int64, rt *rate, total int64) {
	g.Go(func() error {
		if err := r.w.bulk(ctx, ops); err != nil {
			return err
		}
		n := seeded.Add(int64(len(ops)))
		r.update(func(p *Progress) {
			p.DocsSeeded, p.DocsTotal = n, total
			p.Rate = rt.perSecond(n)
			if p.Rate > 0 && total > n {
				p.ETA = (time.Duration(float64(total-n)/p.Rate) * time.Second).Round(time.Second).String()
			}
		})
		return nil
	})
}

// copyAttempts is how often copyServerSide runs a copy whose failures were
// all temporary (an engine too busy to apply a mapping update within its
// 30 s, rejected executions) before it gives up.
const copyAttempts = 5

// copyServerSide runs the engine's copy c as a task and follows it:
// started gets the task id, progress its status at least every second. A
// document the target refuses (a failure of the task) fails the copy with
// the engine's reason. A copy whose failures were all temporary (429, 5xx)
// runs again, after 1, 2, 4 and 8 s: it writes external versions, so what
// the earlier run copied comes back as version conflicts, which are not
// counted again. A cancelled ctx cancels the task.
func (r *Reindexer) copyServerSide(ctx context.Context, c indexer.Copy, started func(task string), progress func(*indexer.TaskInfo)) (*indexer.TaskInfo, error) {
	var copied int64 // created + updated by the earlier runs
	for attempt := 1; ; attempt++ {
		t, err := r.copyOnce(ctx, c, started, func(t *indexer.TaskInfo) {
			if progress != nil {
				progress(sumCopies(t, copied))
			}
		})
		if t != nil {
			t = sumCopies(t, copied)
		}
		if err == nil || t == nil || !t.Temporary() || attempt == copyAttempts {
			return t, err
		}
		wait := time.Second << (attempt - 1)
		r.log.Warn("reindex: the engine refused part of the copy for now; copying again", "attempt", attempt,
			"error", err.Error(), "retry_in", wait)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		copied = t.Created + t.Updated
	}
}

// sumCopies is t with the documents of earlier runs (copied) added, and
// the conflicts they explain taken out.
func sumCopies(t *indexer.TaskInfo, copied int64) *indexer.TaskInfo {
	s := *t
	s.Created += copied
	s.VersionConflicts = max(0, s.VersionConflicts-copied)
	return &s
}

// copyOnce runs the copy c once (see copyServerSide).
func (r *Reindexer) copyOnce(ctx context.Context, c indexer.Copy, started func(task string), progress func(*indexer.TaskInfo)) (*indexer.TaskInfo, error) {
	task, err := r.adm.StartCopy(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("copy %s to %s: %w", c.Source, c.Dest, err)
	}
	if started != nil {
		started(task)
	}
	cancelTask := func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := r.adm.CancelTask(cctx, task); err != nil {
			r.log.Warn("reindex: cancel the copy task", "task", task, "error", err.Error())
		}
	}
	t, err := r.waitTask(ctx, task, progress)
	if err != nil {
		if ctx.Err() != nil {
			cancelTask()
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("copy %s to %s: task %s: %w", c.Source, c.Dest, task, err)
	}
	switch {
	case t.Error != nil:
		return t, fmt.Errorf("copy %s to %s: %s: %s", c.Source, c.Dest, t.Error.Type, t.Error.Reason)
	case len(t.Failures) > 0:
		return t, fmt.Errorf("copy %s to %s: %d documents failed, first: %s", c.Source, c.Dest, len(t.Failures), t.Failures[0])
	}
	return t, nil
}

// waitTask follows the engine task until it completes, handing every
// status read to progress, and returns the last one. It asks without
// making the engine wait: the engine's wait_for_completion looks at the
// task only every 100 ms, which a copy of a few seconds pays at its end.
// The asks come a quarter of the time the task still needs (at its rate so
// far) apart, between pollMin and pollMax: about once a second for a long
// copy, and every few milliseconds near its end.
func (r *Reindexer) waitTask(ctx context.Context, task string, progress func(*indexer.TaskInfo)) (*indexer.TaskInfo, error) {
	start := time.Now()
	for {
		t, err := r.adm.Task(ctx, task, 0)
		if err != nil {
			return nil, err
		}
		if progress != nil {
			progress(t)
		}
		if t.Completed {
			return t, nil
		}
		tm := time.NewTimer(pollAfter(t, time.Since(start)))
		select {
		case <-ctx.Done():
			tm.Stop()
			return nil, ctx.Err()
		case <-tm.C:
		}
	}
}

// pollMin and pollMax bound the pause between two looks at a task.
const (
	pollMin = 5 * time.Millisecond
	pollMax = time.Second
)

// pollAfter is the pause before the next look at task t, running for
// elapsed: a quarter of what it still needs at its rate so far; 4 ×
// pollMin before it has done anything, pollMin once it has done all.
func pollAfter(t *indexer.TaskInfo, elapsed time.Duration) time.Duration {
	done := t.Created + t.Updated + t.VersionConflicts
	switch {
	case done <= 0:
		return 4 * pollMin
	case done >= t.Total:
		return pollMin
	}
	rest := time.Duration(float64(elapsed) * float64(t.Total-done) / float64(done))
	return min(max(rest/4, pollMin), pollMax)
}

// seedPrep is what the seed looks up before it copies: the tombstones to
// leave out and, for the server-side copy, the versions of the live index.
// It runs during the dual-write wait when there is one (startSeedPrep), so
// that the copy has the engine to itself.
type seedPrep struct {
	done chan struct{}
	skip []string // tombstones whose events were all compacted
	err  error
}

// startSeedPrep starts the seed's look-ups in the background: the
// tombstones whose events were all compacted, then, beside each other, the
// replay's read-ahead and (versions) a scroll of the ids and versions of
// source into r.seeded (an event not newer needs no replay).
//
// All of it may run before the consumers write the target too and before
// the refresh of source that precedes the copy. It stays correct because
// the live index only moves forward and the copy starts from a later view
// of it:
//   - a version the scroll reads was visible then, so the copy sees it or a
//     newer one (or the document's delete, an event newer than it, which the
//     replay writes); newer versions written after the refresh reach the
//     target through dual writes. A document written so recently that the
//     scroll missed it is simply replayed.
//   - a tombstone is left out only while it is still one (tombstoneQuery),
//     and its version is forgotten: a document revived meanwhile is copied,
//     one that got an event meanwhile is rebuilt by the replay.
//   - a read-ahead whose watermark was read before the wait ended is not
//     the last pass (prefetch.early): the next one reads the events
//     delivered meanwhile.
func (r *Reindexer) startSeedPrep(ctx context.Context, source string, versions, early bool) *seedPrep {
	p := &seedPrep{done: make(chan struct{})}
	if versions {
		// The versions are all known once p is done: the read-ahead need
		// not wait for the copy to decide which events it reads whole.
		r.versionsKnown = p.done
	}
	go func() {
		defer close(p.done)
		t := time.Now()
		if p.skip, p.err = r.compactedTombstones(ctx, source); p.err != nil {
			return
		}
		r.startPrefetch(ctx, early)
		if !versions {
			return
		}
		n := 0
		err := r.adm.Scroll(ctx, source, nil, 10000, nil, func(_ int64, hits []indexer.ScrollHit) error {
			r.seededMu.Lock()
			for _, h := range hits {
				r.seeded[h.ID] = h.Version
			}
			r.seededMu.Unlock()
			n += len(hits)
			return nil
		})
		if err != nil {
			p.err = fmt.Errorf("reindex: read the versions of %s: %w", source, err)
			return
		}
		r.seededMu.Lock()
		for _, id := range p.skip {
			delete(r.seeded, id) // not copied unless revived: replay its events
		}
		r.seededMu.Unlock()
		r.log.Debug("reindex: seeded versions read", "docs", n, "ms", time.Since(t).Milliseconds())
	}()
	return p
}

// prepared returns the tombstones the seed leaves out once the look-ups
// of startSeedPrep are done, starting them now when the dual-write wait did
// not (a resumed run).
func (r *Reindexer) prepared(ctx context.Context, source string, versions bool) ([]string, error) {
	p := r.prep
	if p == nil {
		p = r.startSeedPrep(ctx, source, versions, false)
		r.prep = p
	}
	t := time.Now()
	select {
	case <-p.done:
	case <-ctx.Done():
		<-p.done // it ends with ctx
		return nil, context.Cause(ctx)
	}
	r.log.Debug("reindex: seed look-ups done", "waited_ms", time.Since(t).Milliseconds())
	if p.err != nil {
		return nil, p.err
	}
	if r.hooks.beforeCopy != nil {
		r.hooks.beforeCopy()
	}
	return p.skip, nil
}
