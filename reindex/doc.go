// Package reindex owns `searchsync reindex`: rebuilding the physical index
// behind an alias from the current index definition with zero downtime, and
// the bookkeeping that makes it resumable, abortable and exclusive.
//
// # How a reindex runs
//
//  1. A job row (aa_job, job_kind reindex, job_key = alias) is started; the
//     unique index on running jobs makes two reindexes of one alias
//     impossible. The next free generation (customers_v3) is recorded and
//     created from the current definition (its hash in _meta).
//  2. Dual writes: params.dual_write is set; from then on the search consumer
//     writes every op of the alias to the target too (Targets, cached
//     TargetsTTL). The reindex waits 2×TargetsTTL so that every consumer has
//     seen it: every event delivered before is committed, hence visible to
//     the replay; every event delivered after reaches both indexes.
//  3. Seed: the live index is refreshed, then its documents are copied
//     with their versions as external versions, by the engine's _reindex
//     API (Config.ClientSeed or Reproject: scroll and bulk through
//     searchsync). This restores the history that compaction already
//     removed from the outbox. Tombstones are copied too, except those of
//     documents no retained event mentions any more (looked up first, left
//     out while they are still tombstones). The target is filled with
//     refresh_interval -1 and no replicas; the definition's values are
//     restored right after the replay (then the target is refreshed and
//     its replicas awaited). A scroll of ids and
//     versions of the live index runs beside the copy: events not newer
//     are skipped (without reading their payloads when every projection of
//     the alias uses the aggregate id as document id and a plain version
//     path; the event heads are read during the copy).
//     With Config.SeedSource (`--seed source:<name>`) the seed reads a
//     backfill source instead (sourceseed.go): its rows in key order by
//     keyset, each row's snapshot event projected and folded as the replay
//     does, written with its version as external version; the last key
//     written is the progress a resumed seed continues from.
//  4. Replay: the retained events (dispatched, and pending ones no failed
//     event blocks) in id order, through upcasters and projections, coalesced
//     per document within a chunk by projections.Fold (the search
//     consumer's fold, so replayed documents equal live ones), written with
//     external versions. A write
//     older than what the target holds is a 409, which is correct. Passes
//     repeat up to the watermark (the max id when a pass starts) until a pass
//     finds less than a chunk of new events.
//  5. Check: first the run waits until the search consumers of the alias
//     (Config.Consumers) have delivered every pending event the replay
//     wrote up to its watermark (Progress.Owed; it gives up when they
//     deliver nothing of it for Config.CatchUpStall), so that the live
//     index is not behind by the relay's lag. Then every id, version
//     and group (entity type, tenant) through the alias filter, the
//     counts per group of what was read, and a sample of sources (modulo
//     fields whose mapping changed). Differences caused by writes in
//     flight are re-read in real time, both sides at once; what persists
//     fails the reindex with a report, deletes the target and leaves the
//     alias untouched.
//  6. Swap: one atomic _aliases call (remove old, add new with the
//     soft-delete filter). The old index is kept for KeepOld (default 24h)
//     and deleted by Cleanup.
//
// Progress (phase, last replayed id, documents seeded, rate, ETA) is written
// to aa_job.progress with every heartbeat. A run that dies (kill -9) leaves
// its job running with a stale heartbeat; the next `searchsync reindex`
// resumes it from the last replayed id (seeding restarts when it had not
// finished; both are idempotent because every write is versioned). Abort
// ends the job, stops the dual writes and deletes the target.
//
// # Writes, and when the engine refuses them
//
// Every write of the reindex (seed through searchsync, replay, tombstone
// deletes) goes through indexer.Writer, the bulk path of the search
// consumer, and is classified by indexer.Classify; the calls beside
// Engine (scroll, group counts, settings, health, the engine's _reindex
// task) go through indexer.Admin. Both seams are covered by the contract
// suite in indexer/enginetest. What an outcome means for a reindex:
//
//   - a document the target refuses for good (poison: the new mapping
//     rejects it) fails the job with the engine's reason, and so does a
//     live write of the search consumer that the target refuses during
//     dual writes (sink/search reports it through Targets.Rejected; the
//     live event keeps the live index's outcome);
//   - what is about the engine rather than the document — no answer, an
//     overloaded engine, a cluster or index write block (the disk
//     watermark's), 401/403, a missing index — makes the reindex wait as
//     the relay does: it probes (ping, the target's write blocks) with
//     backoff up to every 30s and writes again once the probe passes,
//     with the reason in aa_job.progress.waiting. The heartbeat goes on,
//     so the job stays its own; `searchsync reindex abort` or an interrupt
//     (the job resumes later) end the wait;
//   - an item answered 5xx after the writer's own retries is sent again,
//     up to 8 rounds, then the job fails.
//
// # Completeness
//
// A document of the new index is complete when its last event is retained
// (replayed) or when the live index holds it (seeded with its version, then
// updated by any retained later event). What cannot be recovered: a document
// whose every event was compacted and which the live index does not hold (it
// was never indexed, e.g. its events were skipped while no search route
// existed, or it was lost from the live index).
//
// Tombstones (soft deletes) are seeded like every document (they are the
// base later events merge onto and they keep rejecting stale writes),
// except those of documents that no retained event mentions any more (when
// document ids are aggregate ids): every event of such an aggregate was
// compacted, so no stale write of it can arrive. So a reindex is also how
// tombstones leave the index.
//
// A projection change is applied to replayed events; seeded documents are
// copied as they are unless Config.Reproject rewrites them. Seeding from a
// backfill source (Config.SeedSource) recovers what the live index lacks
// and applies the projection to every document; the check then compares
// the source's rows now (less those that are no document of the alias)
// with the target's visible documents, re-read while they differ, instead
// of comparing with the live index (verifySource). A delete that raced the
// seed is newer than the row the seed read, and its retained event is
// replayed after the seed, so the document does not come back.
//
// # Leftovers
//
// The engine creates a missing index on the first write to it, so a live
// write delayed past the 2×TargetsTTL wait after an abort can re-create the
// deleted target. Cleanup (searchsync reindex cleanup, and every reindex at
// its start) deletes such targets of aborted or failed jobs, and the old
// indexes of finished jobs once their keep time has passed; it never deletes
// an index an alias points to.
package reindex
