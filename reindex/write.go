package reindex

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/searchsync/searchsync/delivery"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/linked"
	"github.com/searchsync/searchsync/projections"
)

// maxWriteRounds bounds how often ops answered Retry (a 5xx of the item
// after the Writer's own retries) are sent again before the reindex fails.
const maxWriteRounds = 8

// writer sends the reindex's writes to the target through indexer.Writer —
// the bulk path and the classification (indexer.Classify) of the search
// consumer — and decides what each outcome means for a reindex:
//
//   - OK and Stale are written (Stale: the target holds that version or a
//     newer one, which is correct).
//   - Poison (the new definition refuses the document, or the request as a
//     whole): the reindex fails with the engine's reason.
//   - Retry (an item answered 5xx while its neighbours were written, after
//     the Writer's own retries): sent again, up to maxWriteRounds rounds in
//     all; then the reindex fails with the last reason.
//   - Unavailable (no answer, overloaded, a cluster or index write block,
//     401/403, a missing index): the reindex waits as the relay does — it
//     probes the engine (ping and write blocks of the target) with backoff
//     up to a probe every maxWait, records the reason in
//     aa_job.progress.waiting, and sends again once the probe passes. The
//     heartbeat goes on meanwhile, so the job stays this run's; abort or an
//     interrupt (the job resumes later) end the wait.
//   - NotAttempted: when the context ended, its error; otherwise (an
//     earlier request of the same write failed as a whole) sent again with
//     the Unavailable ones.
type writer struct {
	eng     indexer.Engine
	w       *indexer.Writer
	log     *slog.Logger
	waiting func(reason string) // records (or, with "", clears) the reason of a wait
	maxWait time.Duration       // the longest pause between two probes

	written atomic.Int64
	stale   atomic.Int64
}

func newWriter(eng indexer.Engine, bulkSize, concurrency int, log *slog.Logger, waiting func(string)) *writer {
	return &writer{
		eng:     eng,
		w:       indexer.NewWriter(eng, indexer.WriterConfig{FlushCount: bulkSize, Concurrency: concurrency, Logger: log}),
		log:     log,
		waiting: waiting,
		maxWait: 30 * time.Second,
	}
}

// bulk writes ops (one target index) until each is written or stale; see
// writer for what stops it.
func (w *writer) bulk(ctx context.Context, ops []indexer.BulkOp) error {
	if len(ops) == 0 {
		return nil
	}
	pending := ops
	// One backoff for the whole call: an engine that passes the probe but
	// still refuses the writes (401/403 on the write only) is tried less
	// and less often, up to every maxWait.
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(500*time.Millisecond), backoff.WithMaxInterval(w.maxWait), backoff.WithMaxElapsedTime(0))
	for round := 1; ; round++ {
		outs := w.w.Write(ctx, pending)
		var again []indexer.BulkOp
		var unavailable, retry string
		for i, o := range outs {
			switch o.Kind {
			case delivery.OK:
				w.written.Add(1)
			case delivery.Stale:
				w.stale.Add(1)
			case delivery.Poison:
				return fmt.Errorf("reindex: the engine rejected a write: %s", o.Reason)
			case delivery.Retry:
				retry = o.Reason
				again = append(again, pending[i])
			case delivery.Unavailable:
				unavailable = o.Reason
				again = append(again, pending[i])
			default: // NotAttempted
				if err := context.Cause(ctx); err != nil {
					return err
				}
				again = append(again, pending[i])
			}
		}
		if len(again) == 0 {
			return nil
		}
		pending = again
		switch {
		case unavailable != "":
			if err := w.wait(ctx, b, pending[0].Index, unavailable); err != nil {
				return err
			}
		case retry != "" && round >= maxWriteRounds:
			return fmt.Errorf("reindex: %d writes still failing after %d rounds: %s", len(pending), round, retry)
		}
	}
}

// wait pauses the writes until the engine can take them again: a probe
// (ping, the write blocks of index) with backoff.
func (w *writer) wait(ctx context.Context, b backoff.BackOff, index, reason string) error {
	w.log.Warn("reindex: the engine cannot take writes; waiting", "index", index, "reason", reason)
	w.waiting(reason)
	defer w.waiting("")
	start := time.Now()
	for {
		if err := sleep(ctx, b.NextBackOff()); err != nil {
			return err
		}
		why := w.probe(ctx, index)
		if why == "" {
			w.log.Info("reindex: the engine takes writes again", "index", index, "waited", time.Since(start).Round(time.Millisecond).String())
			return nil
		}
		if err := context.Cause(ctx); err != nil {
			return err
		}
		w.waiting(why)
		w.log.Debug("reindex: still waiting for the engine", "index", index, "reason", why)
	}
}

// probe returns what stands in the way of writing to index ("" when
// nothing does, as far as the engine tells).
func (w *writer) probe(ctx context.Context, index string) string {
	if err := w.eng.Ping(ctx); err != nil {
		return err.Error()
	}
	blocks, err := w.eng.WriteBlocks(ctx, index)
	if indexer.IsForbidden(err) {
		// A user without the cluster state privilege: the blocks cannot be
		// read; the next write tells.
		return ""
	}
	if err != nil {
		return err.Error()
	}
	if len(blocks) > 0 {
		s := make([]string, len(blocks))
		for i, b := range blocks {
			s[i] = b.String()
		}
		return "the engine refuses writes: " + strings.Join(s, "; ")
	}
	return ""
}

// writeLinked replays the steps of a chunk onto the documents of an alias
// that relations reach, through the linked writer (read, fold with the
// sources' versions, guarded write); what each outcome means is as for
// bulk: Poison fails the reindex, Unavailable waits for the engine, Retry
// (a document other writers kept changing, a 5xx) is tried again up to
// maxWriteRounds rounds.
func (r *Reindexer) writeLinked(ctx context.Context, order []string, steps map[string][]*projections.Result) error {
	docs := make([]*linked.Doc, 0, len(order))
	for _, id := range order {
		docs = append(docs, &linked.Doc{Index: r.cfg.Def.Alias, Target: r.target, ID: id, Rules: r.rules, Steps: steps[id]})
	}
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(500*time.Millisecond), backoff.WithMaxInterval(r.w.maxWait), backoff.WithMaxElapsedTime(0))
	for round := 1; len(docs) > 0; round++ {
		r.lw.Write(ctx, docs)
		var again []*linked.Doc
		var unavailable, retry string
		for _, d := range docs {
			switch d.Outcome.Kind {
			case delivery.OK, delivery.Stale:
				if d.Written {
					r.w.written.Add(1)
				}
			case delivery.Poison:
				return fmt.Errorf("reindex: the engine rejected a write: %s", d.Outcome.Reason)
			case delivery.Retry:
				retry = d.Outcome.Reason
				again = append(again, d)
			case delivery.Unavailable:
				unavailable = d.Outcome.Reason
				again = append(again, d)
			default:
				if err := context.Cause(ctx); err != nil {
					return err
				}
				again = append(again, d)
			}
		}
		docs = again
		switch {
		case len(docs) == 0:
		case unavailable != "":
			if err := r.w.wait(ctx, b, r.target, unavailable); err != nil {
				return err
			}
		case retry != "" && round >= maxWriteRounds:
			return fmt.Errorf("reindex: %d documents still failing after %d rounds: %s", len(docs), round, retry)
		}
	}
	return nil
}
