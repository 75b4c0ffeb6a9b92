package reindex

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/mapping"
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
}

const readAhead = 8 // chunks read and projected ahead of the writes

// reader reads the chunks of (from, until] in one goroutine and projects
// them in another (each chunk on every core), so that reading, projecting
// and writing overlap.
//
// heads reads the events without payloads first (chunk.heads): the
// projecting goroutine, once the seed is done, reads whole only those that
// are not older than the seed. That is most of the replay's cost saved when
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
		if r.seedDone != nil {
			// Project only once the seeded versions are known: events the
			// seed holds newer are then skipped without projecting them.
			select {
			case <-r.seedDone:
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
// cursor to the current watermark) while the seed copies (it starts after
// the seed's tombstone look-up, whose outbox queries it would slow down).
func (r *Reindexer) startPrefetch(ctx context.Context) {
	var wm int64
	if err := r.cfg.Pool.QueryRow(ctx, maxIDSQL).Scan(&wm); err != nil {
		return // the replay reads it again and reports the error
	}
	from := r.snapshot().LastID
	// Without payloads where the seed decides which events are needed.
	heads := r.seedDone != nil && r.idIsAggregate && r.versionPathSQL != nil
	reads, cancel := r.reader(ctx, from, wm, heads)
	r.prefetch = &prefetch{from: from, until: wm, reads: reads, cancel: cancel}
}

// replay reads the outbox after progress.LastID up to the watermark (the
// max id when the pass starts) and writes the coalesced documents; passes
// repeat until one finds less than a chunk of new events.
func (r *Reindexer) replay(ctx context.Context) error {
	r.setPhase(PhaseReplay)
	cache := map[string]*docState{}
	const cacheMax = 200_000
	rt := rate{start: time.Now()}
	var docs atomic.Int64
	docs.Store(r.snapshot().DocsWritten)
	rt.n = docs.Load()
	for pass := 0; pass < 50; pass++ {
		var wm int64
		if err := r.cfg.Pool.QueryRow(ctx, maxIDSQL).Scan(&wm); err != nil {
			return fmt.Errorf("reindex: read the outbox watermark: %w", err)
		}
		cursor := r.snapshot().LastID
		first := cursor
		r.update(func(p *Progress) { p.Watermark = wm })
		if cursor >= wm {
			return nil
		}
		var reads <-chan read
		var rcancel context.CancelFunc
		if pf := r.prefetch; pf != nil && pf.from == cursor {
			reads, rcancel, wm = pf.reads, pf.cancel, pf.until
			r.update(func(p *Progress) { p.Watermark = wm })
		} else {
			if pf != nil {
				pf.cancel()
				for range pf.reads {
				}
			}
			reads, rcancel = r.reader(ctx, cursor, wm, false)
		}
		r.prefetch = nil
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(r.cfg.Concurrency)
		// done tracks the chunks in flight in order, so that LastID only
		// moves past chunks whose every write finished.
		var dmu sync.Mutex
		type inflight struct {
			last    int64
			pending int
			events  int
		}
		var queue []*inflight
		settle := func() {
			for len(queue) > 0 && queue[0].pending == 0 {
				q := queue[0]
				queue = queue[1:]
				r.update(func(p *Progress) {
					p.LastID = q.last
					p.EventsReplayed += int64(q.events)
				})
			}
		}
		var failed error
		for rd := range reads {
			if rd.err != nil {
				failed = rd.err
				break
			}
			if gctx.Err() != nil {
				break
			}
			c, order, steps := rd.c, rd.order, rd.steps
			if r.slow > 0 {
				_ = sleep(gctx, r.slow)
			}
			// Documents seeded at a version no event of the chunk exceeds
			// are complete already.
			order = r.skipSeeded(order, steps, cache)
			// Bases the cache does not have come from the target (seeded
			// documents, earlier live writes).
			var need []string
			for _, id := range order {
				first := steps[id][0]
				if _, ok := cache[id]; !ok && ((first.Op == projections.OpIndex && first.Partial) ||
					(first.Op == projections.OpDelete && r.cfg.Def.DeleteMode == mapping.DeleteSoft)) {
					need = append(need, id)
				}
			}
			if len(need) > 0 {
				tm := time.Now()
				found, err := r.mget(gctx, r.target, need)
				r.log.Debug("reindex: mget", "ids", len(need), "ms", time.Since(tm).Milliseconds())
				if err != nil {
					failed = fmt.Errorf("reindex: read current documents from %s: %w", r.target, err)
					break
				}
				// A document the target lacks may be a tombstone of the live
				// index (seeding skips them): its last state is the base, and
				// it is copied even when no event is newer. Tombstones whose
				// events were all compacted are dropped this way, the others
				// kept.
				if r.source != "" {
					var missing []string
					for _, id := range need {
						if _, ok := found[id]; !ok {
							missing = append(missing, id)
						}
					}
					if len(missing) > 0 {
						fromSource, err := r.mget(gctx, r.source, missing)
						if err != nil {
							failed = fmt.Errorf("reindex: read current documents from %s: %w", r.source, err)
							break
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
							st.doc, st.version, st.known, st.copy = m, d.Version, true, d.copy
							if del, _ := m[r.cfg.Def.TombstoneField].(bool); del && r.cfg.Def.DeleteMode == mapping.DeleteSoft {
								st.deleted = true
							}
						}
					}
					cache[id] = st
				}
			}
			ops := make([]indexer.BulkOp, 0, len(order))
			for _, id := range order {
				st := cache[id]
				if st == nil {
					st = &docState{}
					cache[id] = st
				}
				op, ok, err := r.apply(id, st, steps[id])
				if err != nil {
					failed = err
					break
				}
				if ok {
					ops = append(ops, op)
				}
			}
			if failed != nil {
				break
			}
			// Every part is counted before the chunk is queued: a write of
			// an earlier chunk that settles in between must not take this
			// chunk for done (LastID would pass writes never sent, which a
			// resumed run skips).
			parts := max(1, (len(ops)+r.cfg.BulkSize-1)/r.cfg.BulkSize)
			item := &inflight{last: c.last, events: c.read, pending: parts}
			dmu.Lock()
			queue = append(queue, item)
			dmu.Unlock()
			if r.hooks.beforeDispatch != nil {
				r.hooks.beforeDispatch(c.last)
			}
			for i := 0; i < len(ops) || i == 0; i += r.cfg.BulkSize {
				part := ops[i:min(i+r.cfg.BulkSize, len(ops))]
				g.Go(func() error {
					if r.hooks.beforeBulk != nil {
						r.hooks.beforeBulk(c.last)
					}
					err := r.w.bulk(gctx, part)
					if err != nil {
						return err
					}
					n := docs.Add(int64(len(part)))
					dmu.Lock()
					item.pending--
					settle()
					dmu.Unlock()
					r.update(func(p *Progress) {
						p.DocsWritten = n
						p.Rate = rt.perSecond(n)
						if done := c.last - first; done > 0 && wm > c.last {
							secs := time.Since(rt.start).Seconds() * float64(wm-c.last) / float64(done)
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
			if len(cache) > cacheMax {
				// Evict only when no write is in flight, so that a later
				// read of the target sees every write of the replay.
				if err := g.Wait(); err != nil {
					failed = err
					break
				}
				g, gctx = errgroup.WithContext(ctx)
				g.SetLimit(r.cfg.Concurrency)
				clear(cache)
			}
		}
		rcancel()
		for range reads {
		}
		if err := g.Wait(); failed == nil {
			failed = err
		}
		if failed != nil {
			return failed
		}
		dmu.Lock()
		settle()
		dmu.Unlock()
		n := r.snapshot().EventsReplayed
		r.log.Info("reindex: replay pass done", "pass", pass+1, "watermark", wm, "events", n, "docs_written", docs.Load())
		if err := r.saveProgress(ctx); err != nil {
			return err
		}
		if wm-first < int64(r.cfg.ChunkSize) {
			return nil // caught up: what comes now reaches the target by dual writes
		}
	}
	return nil
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
