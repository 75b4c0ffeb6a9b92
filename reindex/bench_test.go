package reindex

import (
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/mapping"
)

var (
	benchEvents    = flag.Int("reindex.events", 60000, "events written to the outbox for BenchmarkReindex")
	benchClient    = flag.Bool("reindex.client-seed", false, "seed through searchsync (scroll + bulk) instead of the engine's _reindex")
	benchCompacted = flag.Float64("reindex.compacted", 0.5, "share of the oldest events compacted before BenchmarkReindex (the rest is replayed, the live index seeds the remainder)")
)

// BenchmarkReindex measures the reindex rate and divides it by the raw
// _bulk rate of the same documents (same ids, versions, sources, batch size
// and concurrency) sent straight to a fresh index of the same definition in
// the same run (indexer.RawBulkRateConcurrent, which ends with a refresh).
//
// The reindex rate is documents in the new index per second of fill: every
// step that puts documents into the new index and makes them searchable —
// the refresh of the live index, the server-side copy, the replay of the
// outbox and the restore of the definition's refresh interval and replicas
// with the refresh and health wait that follow (the raw side's time ends
// with a refresh too). Left out, and printed apart with the whole run: the
// fixed 2×TargetsTTL wait until every consumer dual-writes (it does not
// grow with the documents), the completeness check and the alias swap. The
// tombstone look-up, the scroll of versions and the replay's read-ahead run
// during that wait; what of them outlasts it counts in the seed.
//
// reindex-ratio is the bare _reindex's time ÷ the fill's: how fast the
// reindex rebuilds the index from the live one against the engine copying
// that same source itself (the mean of a copy before and one after the
// reindex; reindex-ratio-engine-wait against a copy followed with the
// engine's wait_for_completion). Both read every document of the source;
// the reindex writes fewer, since it leaves out the tombstones of
// aggregates without retained events, so a ratio of documents written per
// second (reindex-ratio-docs) counts that saving against it.
//
//	go test ./reindex -run '^$' -bench BenchmarkReindex -benchtime 1x [-reindex.events 60000]
func BenchmarkReindex(b *testing.B) {
	for i := 0; i < b.N; i++ {
		benchOnce(b)
	}
}

func benchOnce(tb testing.TB) {
	b := setup(tb)
	start := time.Now()
	b.write(*benchEvents)
	b.dispatchAll()
	old := b.buildLive(b.def(nil))
	removed := b.compact(*benchCompacted)
	fmt.Fprintf(os.Stderr, "setup: %d events, %d compacted, live index %s built in %s\n", *benchEvents, removed, old, time.Since(start).Round(time.Millisecond))
	tb.Logf("setup: %d events, %d compacted, live index %s built in %s", *benchEvents, removed, old, time.Since(start).Round(time.Millisecond))

	cfg := b.config(b.def(emailAsText))
	cfg.ChunkSize, cfg.BulkSize, cfg.Concurrency = 5000, 1000, 2
	cfg.ClientSeed = *benchClient
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: benchLevel()}))
	r, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	// The engine's own copy of the same source: a bare _reindex of the
	// live index into a fresh index of the new definition, with the fill
	// settings the reindex uses (no refresh, no replicas) and the same
	// batch and slices as its seed, then a refresh. Followed as the seed
	// follows its copy (waitTask) once before the reindex and once after
	// it, and the ratio takes the mean of the two rates (as the end-to-end
	// benchmark does with its raw runs): run only after it, the bare copy
	// came second to the same source every time. Then once more with the
	// engine's wait_for_completion (it looks every 100 ms).
	bare := func(gen int, engineWait bool) (int64, float64) {
		index := mapping.PhysicalName(b.alias, gen)
		if err := mapping.CreatePhysical(b.ctx, b.eng, cfg.Def, index, false); err != nil {
			tb.Fatal(err)
		}
		if err := r.adm.PutSettings(b.ctx, index, map[string]any{"refresh_interval": "-1", "number_of_replicas": 0}); err != nil {
			tb.Fatal(err)
		}
		t0 := time.Now()
		task, err := r.adm.StartCopy(b.ctx, indexer.Copy{Source: old, Dest: index, Batch: cfg.BulkSize, Slices: cfg.Concurrency})
		if err != nil {
			tb.Fatal(err)
		}
		var copied *indexer.TaskInfo
		if engineWait {
			for copied == nil || !copied.Completed {
				if copied, err = r.adm.Task(b.ctx, task, 10*time.Second); err != nil {
					tb.Fatal(err)
				}
			}
		} else if copied, err = r.waitTask(b.ctx, task, nil); err != nil {
			tb.Fatal(err)
		}
		if err := b.eng.Refresh(b.ctx, index); err != nil {
			tb.Fatal(err)
		}
		el := time.Since(t0).Seconds()
		if err := b.eng.DeleteIndex(b.ctx, index); err != nil {
			tb.Fatal(err)
		}
		return copied.Created + copied.Updated, el
	}
	beforeDocs, beforeTime := bare(7, false)
	res, err := r.Run(b.ctx)
	if err != nil {
		tb.Fatal(err)
	}
	tm := res.Timings
	fill := tm.Seed + tm.Replay + tm.Refresh

	// The same documents, raw.
	var ops []indexer.BulkOp
	err = r.adm.Scroll(b.ctx, res.NewIndex, nil, 1000, indexer.WholeSource, func(_ int64, hits []indexer.ScrollHit) error {
		for _, h := range hits {
			ops = append(ops, indexer.BulkOp{Type: indexer.OpIndex, ID: h.ID, Version: h.Version, Doc: json.RawMessage(h.Source)})
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	rawIndex := mapping.PhysicalName(b.alias, 6)
	if err := mapping.CreatePhysical(b.ctx, b.eng, cfg.Def, rawIndex, false); err != nil {
		tb.Fatal(err)
	}
	rawRate, err := indexer.RawBulkRateConcurrent(b.ctx, b.eng, rawIndex, ops, cfg.BulkSize, cfg.Concurrency)
	if err != nil {
		tb.Fatal(err)
	}
	rate := float64(len(ops)) / fill

	afterDocs, afterTime := bare(8, false)
	bareRate := (float64(beforeDocs)/beforeTime + float64(afterDocs)/afterTime) / 2
	bareTime := (beforeTime + afterTime) / 2
	engDocs, engTime := bare(9, true)
	engRate := float64(engDocs) / engTime
	p := res.Progress
	logf := func(format string, args ...any) {
		tb.Logf(format, args...)
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	}
	logf("reindex: %d docs (%d seeded, %d tombstones not copied, %d events replayed → %d writes, %d stale, %d older than the seed) in %.2fs (seed %.2fs + replay %.2fs + refresh %.2fs): %.0f docs/s",
		len(ops), p.DocsSeeded, p.TombstonesDropped, p.EventsReplayed, p.DocsWritten, p.Stale, p.SeedNewer, fill, tm.Seed, tm.Replay, tm.Refresh, rate)
	logf("whole run %.2fs: dual-write wait %.2fs, fill %.2fs, check %.2fs, rest (job, create, swap) %.2fs",
		res.Seconds, tm.Wait, fill, tm.Verify, res.Seconds-tm.Wait-fill-tm.Verify)
	logf("raw _bulk: %s", rawRate)
	logf("ratio reindex/raw = %.2f", rate/rawRate.PerSecond)
	logf("bare _reindex of the live index: %d docs (tombstones included) in %.2fs before the reindex, %d in %.2fs after: %.0f docs/s; fill ratio reindex/_reindex = %.2f (docs/s), %.2f (time)",
		beforeDocs, beforeTime, afterDocs, afterTime, bareRate, rate/bareRate, bareTime/fill)
	logf("bare _reindex followed with the engine's wait_for_completion: %d docs in %.2fs: %.0f docs/s; ratio %.2f (docs/s), %.2f (time)",
		engDocs, engTime, engRate, rate/engRate, engTime/fill)
	if bb, ok := tb.(*testing.B); ok {
		bb.ReportMetric(rate, "docs/s")
		bb.ReportMetric(rawRate.PerSecond, "raw-docs/s")
		bb.ReportMetric(rate/rawRate.PerSecond, "ratio")
		bb.ReportMetric(bareRate, "bare-reindex-docs/s")
		bb.ReportMetric(bareTime/fill, "reindex-ratio")
		bb.ReportMetric(rate/bareRate, "reindex-ratio-docs")
		bb.ReportMetric(engTime/fill, "reindex-ratio-engine-wait")
	}
}

func benchLevel() slog.Level {
	if os.Getenv("REINDEX_DEBUG") != "" {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}
