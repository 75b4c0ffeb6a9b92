package reindex

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/projections"
)

// read is one chunk read and projected ahead of the writes.
type read struct {
	c     *chunk
	order []string
	steps map[string][]*projections.Result
	err   error
}

// prefetch is a reader started before seeding (the events are read and
// projected while the seed writes; nothing is written before the seed ends).
type prefetch struct {
	from, until int64
	reads       <-chan read
	cancel      context.CancelFunc
	// early says that until was read during the dual-write wait: events
	// after it may have reached the live index only, so the pass reading
	// this is never the last.
	early bool
}

const readAhead = 8 // chunks read and projected ahead of the writes

// reader reads the chunks of (from, until] in one goroutine and projects
// them in another (each chunk on every core), so that reading, projecting
// and writing overlap.
//
// heads reads the events without payloads first (chunk.heads): the
// projecting goroutine, once the seeded versions are known (before the
// server-side copy, after the client-side one), reads whole only those
// that are not older than the seed. That is most of the replay's cost saved when
// the live index holds nearly everything, as it does.
func (r *Reindexer) reader(ctx context.Context, from, until int64, heads bool) (<-chan read, context.CancelFunc) {
	raws := make(chan read, readAhead)
	reads := make(chan read, readAhead)
	rctx, cancel := context.WithCancel(ctx)
	go func() {
		defer close(raws)
		cur := from
		for cur < until {
			t := time.Now()
			c, err := r.readChunk(rctx, cur, until, heads)
			if err == nil {
				r.log.Debug("reindex: chunk read", "events", len(c.events), "read_ms", time.Since(t).Milliseconds())
			}
			select {
			case raws <- read{c: c, err: err}:
			case <-rctx.Done():
				return
			}
			if err != nil {
				return
			}
			cur = c.last
		}
	}()
	go func() {
		defer close(reads)
		if known := cmp.Or(r.versionsKnown, r.seedDone); known != nil {
			// Project only once the seeded versions are known: events the
			// seed holds newer are then skipped without projecting them.
			select {
			case <-known:
			case <-rctx.Done():
				for range raws {
				}
				return
			}
		}
		for rd := range raws {
			if rd.err == nil && rd.c.heads {
				t := time.Now()
				n := len(rd.c.events)
				rd.err = r.readRest(rctx, rd.c)
				r.log.Debug("reindex: chunk completed", "events", n, "read_whole", len(rd.c.events), "ms", time.Since(t).Milliseconds())
			}
			if rd.err == nil {
				t := time.Now()
				rd.order, rd.steps = r.project(rd.c)
				r.log.Debug("reindex: chunk projected", "events", len(rd.c.events), "project_ms", time.Since(t).Milliseconds())
			}
			select {
			case reads <- rd:
			case <-rctx.Done():
				for range raws {
				}
				return
			}
		}
	}()
	return reads, cancel
}

// startPrefetch starts reading the first replay pass (from the recorded
// cursor to the current watermark) before the seed ends (it starts after
// the seed's tombstone look-up, whose outbox queries it would slow down).
// early: during the dual-write wait (see prefetch.early).
func (r *Reindexer) startPrefetch(ctx context.Context, early bool) {
	var wm int64
	if err := r.cfg.Pool.QueryRow(ctx, maxIDSQL).Scan(&wm); err != nil {
		return // the replay reads it again and reports the error
	}
	from := r.snapshot().LastID
	// Without payloads where the seed decides which events are needed.
	heads := r.seedDone != nil && r.idIsAggregate && r.versionPathSQL != nil
	reads, cancel := r.reader(ctx, from, wm, heads)
	r.prefetch = &prefetch{from: from, until: wm, reads: reads, cancel: cancel, early: early}
}

// maxPasses bounds the replay passes; cacheMax the documents the replay
// keeps in memory between chunks (the cache is dropped beyond it).
const (
	maxPasses = 50
	cacheMax  = 200_000
)

// replay reads the outbox after progress.LastID up to the watermark (the
// max id when the pass starts) and writes the coalesced documents; passes
// repeat until one finds less than a chunk of new events.
func (r *Reindexer) replay(ctx context.Context) error {
	r.setPhase(PhaseReplay)
	cache := map[string]*docState{}
	rt := rate{start: time.Now()}
	var docs atomic.Int64
	docs.Store(r.snapshot().DocsWritten)
	rt.n = docs.Load()
	for pass := 0; pass < maxPasses; pass++ {
		done, err := r.replayPass(ctx, pass, cache, &docs, &rt)
		if err != nil {
			return err
		}
		if done {
			if r.lw != nil {
				return r.refreshCopies(ctx)
			}
			return nil
		}
	}
	return nil
}

// replayPass replays the events after the recorded LastID up to the
// current watermark. done says that no further pass is needed: nothing was
// new, or less than a chunk (what comes now reaches the target by dual
// writes).
func (r *Reindexer) replayPass(ctx context.Context, pass int, cache map[string]*docState, docs *atomic.Int64, rt *rate) (done bool, err error) {
	var wm int64
	if err := r.cfg.Pool.QueryRow(ctx, maxIDSQL).Scan(&wm); err != nil {
		return false, fmt.Errorf("reindex: read the outbox watermark: %w", err)
	}
	first := r.snapshot().LastID
	r.update(func(p *Progress) { p.Watermark = wm })
	if first >= wm {
		return true, nil
	}
	reads, rcancel, wm, early := r.passReader(ctx, first, wm)
	w := &passWriter{r: r, first: first, wm: wm, docs: docs, rt: rt, q: &settleQueue{r: r}}
	w.reset(ctx)
	failed := r.replayChunks(ctx, reads, cache, w)
	rcancel()
	for range reads {
	}
	if err := w.g.Wait(); failed == nil {
		failed = err
	}
	if failed != nil {
		return false, failed
	}
	w.q.settle()
	n := r.snapshot().EventsReplayed
	r.log.Info("reindex: replay pass done", "pass", pass+1, "watermark", wm, "events", n, "docs_written", docs.Load())
	if err := r.saveProgress(ctx); err != nil {
		return false, err
	}
	return wm-first < int64(r.cfg.ChunkSize) && !early, nil
}

// passReader returns the reads of (from, wm]: the prefetch started before
// the seed ended when it begins at from (its watermark then, and whether
// that was read during the dual-write wait), a new reader otherwise.
func (r *Reindexer) passReader(ctx context.Context, from, wm int64) (<-chan read, context.CancelFunc, int64, bool) {
	pf := r.prefetch
	r.prefetch = nil
	if pf != nil && pf.from == from {
		r.update(func(p *Progress) { p.Watermark = pf.until })
		return pf.reads, pf.cancel, pf.until, pf.early
	}
	if pf != nil {
		pf.cancel()
		for range pf.reads {
		}
	}
	reads, cancel := r.reader(ctx, from, wm, false)
	return reads, cancel, wm, false
}

// replayChunks turns every chunk read into writes: documents the seed holds
// newer are left out, the bases of the others are read, the steps applied,
// the ops handed to w.
func (r *Reindexer) replayChunks(ctx context.Context, reads <-chan read, cache map[string]*docState, w *passWriter) error {
	for rd := range reads {
		if rd.err != nil {
			return rd.err
		}
		if w.gctx.Err() != nil {
			return nil //nolint:nilerr // a write failed: its error comes from w.g.Wait
		}
		if r.slow > 0 {
			_ = sleep(w.gctx, r.slow)
		}
		if r.lw != nil {
			// Relations reach the alias: each chunk is written before the
			// next is read, so that a document's steps keep their order.
			if err := w.g.Wait(); err != nil {
				return err
			}
			w.reset(ctx)
			if err := r.writeLinked(w.gctx, rd.order, rd.steps); err != nil {
				return err
			}
			w.write(rd.c, nil)
			continue
		}
		// Documents seeded at a version no event of the chunk exceeds
		// are complete already.
		order := r.skipSeeded(rd.order, rd.steps, cache)
		if err := r.loadBases(w.gctx, order, rd.steps, cache); err != nil {
			return err
		}
		ops, err := r.chunkOps(order, rd.steps, cache)
		if err != nil {
			return err
		}
		w.write(rd.c, ops)
		if len(cache) > cacheMax {
			// Evict only when no write is in flight, so that a later
			// read of the target sees every write of the replay.
			if err := w.g.Wait(); err != nil {
				return err
			}
			w.reset(ctx)
			clear(cache)
		}
	}
	return nil
}

// loadBases puts into cache the current documents that the first step of
// a document of order merges onto (partial updates, soft deletes) and the
// cache lacks: from the target (seeded documents, earlier live writes),
// else from the live index.
func (r *Reindexer) loadBases(ctx context.Context, order []string, steps map[string][]*projections.Result, cache map[string]*docState) error {
	var need []string
	for _, id := range order {
		if _, ok := cache[id]; !ok && r.rules.NeedsState(steps[id][0]) {
			need = append(need, id)
		}
	}
	if len(need) == 0 {
		return nil
	}
	tm := time.Now()
	found, err := r.mget(ctx, r.target, need)
	r.log.Debug("reindex: mget", "ids", len(need), "ms", time.Since(tm).Milliseconds())
	if err != nil {
		return fmt.Errorf("reindex: read current documents from %s: %w", r.target, err)
	}
	// A document the target lacks may be a tombstone of the live index
	// (seeding skips them): its last state is the base, and it is copied
	// even when no event is newer. Tombstones whose events were all
	// compacted are dropped this way, the others kept.
	if r.source != "" {
		var missing []string
		for _, id := range need {
			if _, ok := found[id]; !ok {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			fromSource, err := r.mget(ctx, r.source, missing)
			if err != nil {
				return fmt.Errorf("reindex: read current documents from %s: %w", r.source, err)
			}
			for id, d := range fromSource {
				d.copy = true
				found[id] = d
			}
		}
	}
	for _, id := range need {
		st := &docState{}
		if d, ok := found[id]; ok {
			m, err := projections.Decode(d.Source)
			if err == nil {
				st.doc, st.version, st.copy = m, d.Version, d.copy
			}
		}
		cache[id] = st
	}
	return nil
}

// chunkOps applies the steps of every document of order onto its cached
// state and returns the writes.
func (r *Reindexer) chunkOps(order []string, steps map[string][]*projections.Result, cache map[string]*docState) ([]indexer.BulkOp, error) {
	ops := make([]indexer.BulkOp, 0, len(order))
	for _, id := range order {
		st := cache[id]
		if st == nil {
			st = &docState{}
			cache[id] = st
		}
		op, ok, err := r.apply(id, st, steps[id])
		if err != nil {
			return nil, err
		}
		if ok {
			ops = append(ops, op)
		}
	}
	return ops, nil
}

// passWriter sends the writes of one pass, at most Concurrency bulk
// requests at once, and moves LastID through its settle queue.
type passWriter struct {
	r         *Reindexer
	first, wm int64 // the pass's range, for the ETA
	docs      *atomic.Int64
	rt        *rate
	q         *settleQueue
	g         *errgroup.Group
	gctx      context.Context
}

// reset starts a new group of writes (after the cache was dropped).
func (w *passWriter) reset(ctx context.Context) {
	w.g, w.gctx = errgroup.WithContext(ctx)
	w.g.SetLimit(w.r.cfg.Concurrency)
}

// write queues chunk c with its ops and sends them in parts of BulkSize (a
// chunk without ops still passes through the queue, in order).
func (w *passWriter) write(c *chunk, ops []indexer.BulkOp) {
	r := w.r
	parts := max(1, (len(ops)+r.cfg.BulkSize-1)/r.cfg.BulkSize)
	item := w.q.add(c.last, c.read, parts)
	if r.hooks.beforeDispatch != nil {
		r.hooks.beforeDispatch(c.last)
	}
	gctx := w.gctx
	for i := 0; i < len(ops) || i == 0; i += r.cfg.BulkSize {
		part := ops[i:min(i+r.cfg.BulkSize, len(ops))]
		w.g.Go(func() error {
			if r.hooks.beforeBulk != nil {
				r.hooks.beforeBulk(c.last)
			}
			if err := r.w.bulk(gctx, part); err != nil {
				return err
			}
			n := w.docs.Add(int64(len(part)))
			w.q.done(item)
			r.update(func(p *Progress) {
				p.DocsWritten = n
				p.Rate = w.rt.perSecond(n)
				if done := c.last - w.first; done > 0 && w.wm > c.last {
					secs := time.Since(w.rt.start).Seconds() * float64(w.wm-c.last) / float64(done)
					p.ETA = (time.Duration(secs) * time.Second).Round(time.Second).String()
				} else {
					p.ETA = "0s"
				}
			})
			return nil
		})
		if len(ops) == 0 {
			break
		}
	}
}

// settleQueue holds the chunks of a pass whose writes are in flight, in id
// order, so that LastID only moves past chunks whose every write finished.
type settleQueue struct {
	r     *Reindexer
	mu    sync.Mutex
	queue []*inflight
}

// inflight is one chunk in the settle queue.
type inflight struct {
	last    int64
	pending int // its writes not finished
	events  int
}

// add queues a chunk with all its parts counted at once: a write of an
// earlier chunk that settles in between must not take this chunk for done
// (LastID would pass writes never sent, which a resumed run skips).
func (q *settleQueue) add(last int64, events, parts int) *inflight {
	it := &inflight{last: last, events: events, pending: parts}
	q.mu.Lock()
	q.queue = append(q.queue, it)
	q.mu.Unlock()
	return it
}

// done counts one finished write of it and settles what it can.
func (q *settleQueue) done(it *inflight) {
	q.mu.Lock()
	defer q.mu.Unlock()
	it.pending--
	q.settleLocked()
}

// settle moves LastID past the leading chunks that are done.
func (q *settleQueue) settle() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.settleLocked()
}

func (q *settleQueue) settleLocked() {
	for len(q.queue) > 0 && q.queue[0].pending == 0 {
		it := q.queue[0]
		q.queue = q.queue[1:]
		q.r.update(func(p *Progress) {
			p.LastID = it.last
			p.EventsReplayed += int64(it.events)
		})
	}
}

// baseDoc is a current document read for the replay.
type baseDoc struct {
	indexer.Doc
	copy bool // read from the live index: copy it even when no event is newer
}

func (r *Reindexer) mget(ctx context.Context, index string, ids []string) (map[string]baseDoc, error) {
	m, err := r.cfg.Engine.MGet(ctx, index, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[string]baseDoc, len(m))
	for k, v := range m {
		out[k] = baseDoc{Doc: v}
	}
	return out, nil
}

// skipSeeded drops the documents whose every step in the chunk is not newer
// than the version seeded for them, and the steps older than it for the
// others: seeding wrote a later state already.
func (r *Reindexer) skipSeeded(order []string, steps map[string][]*projections.Result, cache map[string]*docState) []string {
	if len(r.seeded) == 0 {
		return order
	}
	out := order[:0]
	for _, id := range order {
		v, ok := r.seeded[id]
		if !ok {
			out = append(out, id)
			continue
		}
		st := steps[id]
		if st[len(st)-1].Version <= v {
			r.skipped.Add(1)
			continue
		}
		if _, cached := cache[id]; !cached {
			// Only the events after the seeded version matter; the base
			// is the seeded document (read from the target).
			i := 0
			for i < len(st) && st[i].Version <= v {
				i++
			}
			steps[id] = st[i:]
		}
		out = append(out, id)
	}
	return out
}
