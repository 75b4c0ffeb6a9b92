// Package backfill owns backfill sources: SQL over a platform's own tables
// whose rows become snapshot events in the outbox (docs/backfill.md), so
// that data the outbox never held, or no longer holds, reaches the indexes
// through the relay like every event.
//
// A Source is declared in the configuration (backfill.sources). Open checks
// its query against the database and returns a Reader, which reads the rows
// in key order by keyset pagination. Run writes them: one transaction per
// chunk reads the chunk's keys, takes the producers' advisory lock of each
// aggregate (outbox.Writer.Lock), reads the rows again under the locks,
// writes one snapshot event per row (outbox.Writer.Write) and records the
// job's progress (aa_job, kind backfill, key the source's name). So a
// snapshot is placed in id order after every change it holds and before
// every change it does not, and a run that dies resumes after its last
// committed chunk. Before each chunk Run waits while the outbox holds more
// than MaxBacklog pending events, and for the rate limit.
//
// The reindex's seed from a source (reindex --seed source:<name>) reads
// through a Reader too, without locks: the replay that follows it orders
// its documents.
package backfill
