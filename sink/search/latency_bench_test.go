package search_test

import (
	"encoding/json"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/searchsync/searchsync/examples/customer"
	"github.com/searchsync/searchsync/indexer"
	"github.com/searchsync/searchsync/internal/loadgen"
	"github.com/searchsync/searchsync/internal/testenv"
	"github.com/searchsync/searchsync/outbox"
	"github.com/searchsync/searchsync/projections"
	"github.com/searchsync/searchsync/relay"
)

// BenchmarkLatencyAtHalfRate measures, from the producer's commit, how long
// an event takes to be acknowledged and to become searchable while the
// producers write at half of the maximum rate (below). One relay, default
// configuration, the realistic workload (loadgen.Realistic):
//
//  1. the maximum rate: the relay drains a backlog of its first 40,000
//     events (max_events/s); then eight producers write the next 10,000 in
//     transactions of 10 as fast as they can while the relay runs, and the
//     rate at which they are committed and all acknowledged is the
//     machine's (system_max_events/s): on one machine the producers'
//     transactions cost PostgreSQL more than the relay's claims and acks,
//     so producers sharing it never reach half of the drain rate, and a
//     steady phase asked for that measured a saturated machine, not one
//     at half load. The maximum rate is the lower of the two;
//
//  2. the steady phase: the next 30,000 events, written by the eight
//     producers at half the maximum rate, the first 10,000 a warm-up;
//     for every event of the other 20,000, commit → acknowledged is
//     the ack statement's now() (dispatched_at; the ack's own commit comes
//     a few milliseconds later) minus the time its COMMIT returned to the
//     producer;
//
//  3. commit → searchable, for the last event of every transaction that
//     writes a live document: a poller reads the alias's refresh counts
//     every 20 ms (refresh_interval 1s) and, when one grew (at the latest
//     every 250 ms), searches the alias for the pending documents by id; it
//     takes the end of the first search whose hit has the event's version
//     or a newer one. (It used to search every 20 ms: 50 searches a second
//     for hundreds of ids each cost the engine a third of its CPU in the
//     steady phase, which the relay's deliveries then waited for; a refresh
//     count costs the engine about 0.6 ms of CPU.)
//
//     go test ./sink/search -run '^$' -bench LatencyAtHalfRate -benchtime 1x
//
// pin=on gives the engine CPU 1 alone and everything else (PostgreSQL,
// the relay, the producers, the poller) CPU 0, as BenchmarkEndToEndRealistic
// does: the engine on hosts of its own. The CPU of each process during the
// steady phase and the machine's busy share are printed beside the figures.
// SEARCHSYNC_BENCH_IN_FLIGHT, _BATCH and _MAX_BATCH set relay.in_flight,
// batch_size and max_batch_size, as for BenchmarkEndToEndRealistic;
// SEARCHSYNC_BENCH_RATE_SHARE another share of the maximum rate than 0.5.
func BenchmarkLatencyAtHalfRate(b *testing.B) {
	for _, pin := range []bool{false, true} {
		name := "pin=off"
		if pin {
			name = "pin=on"
		}
		b.Run(name, func(b *testing.B) { benchLatency(b, pin) })
	}
}

func benchLatency(b *testing.B, pin bool) {
	for range b.N {
		bd := setup(b)
		w := loadgen.Realistic()
		w.Events = 80000
		all := w.Make()
		bd.produceMany(all[:40000])
		if pin {
			restore, err := testenv.Pin(1)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(restore)
		}
		flatOut, warm, steady := all[40000:50000], all[50000:60000], all[60000:]

		cons := bd.consumer(nil)
		cfg := relay.Config{Schema: bd.db.Schema, Logger: slog.New(slog.DiscardHandler),
			Routes: []relay.Route{{Consumer: cons, Match: func(et, at string) bool {
				return strings.HasPrefix(et, "entity.customer.") && at == customer.AggregateType
			}}}}
		relayKnobs(b, &cfg)
		var batchMu sync.Mutex
		var steadyBatches []relay.BatchStats // of the steady phase
		measuring := false
		cfg.OnBatch = func(bs relay.BatchStats) {
			batchMu.Lock()
			if measuring {
				steadyBatches = append(steadyBatches, bs)
			}
			batchMu.Unlock()
		}
		r, err := relay.New(bd.db.Pool, cfg)
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		runRelay(b, r)
		bd.waitPending(10 * time.Minute)
		drainRate := 40000 / time.Since(t0).Seconds()
		share := 0.5
		if v := os.Getenv("SEARCHSYNC_BENCH_RATE_SHARE"); v != "" {
			// another share of the maximum rate than half
			var err error
			if share, err = strconv.ParseFloat(v, 64); err != nil || share <= 0 || share > 1 {
				b.Fatalf("SEARCHSYNC_BENCH_RATE_SHARE=%q: want a number in (0, 1]", v)
			}
		}
		// Producers, each with the events of its share of the customers
		// (so that every customer's events keep their order); perSecond 0
		// writes as fast as they can, else each is paced at its share.
		const txSize, producers = 10, 8
		poller := newSearchablePoller(bd)
		go poller.run()
		var mu sync.Mutex
		commits := map[int64]time.Time{}
		produce := func(evs []outbox.Event, perSecond float64, measure bool) (produced float64) {
			shares := make([][]outbox.Event, producers)
			for _, e := range evs {
				k := int(e.AggregateID[0]) % producers
				shares[k] = append(shares[k], e)
			}
			started := time.Now()
			var wg sync.WaitGroup
			for _, share := range shares {
				wg.Go(func() {
					var pace <-chan time.Time
					if perSecond > 0 {
						tick := time.NewTicker(time.Duration(float64(time.Second) * txSize * producers / perSecond))
						defer tick.Stop()
						pace = tick.C
					}
					for i := 0; i < len(share); i += txSize {
						if pace != nil {
							<-pace
						}
						evs, at := bd.produceAt(share[i:min(i+txSize, len(share))])
						if len(evs) == 0 || !measure {
							continue
						}
						mu.Lock()
						for _, e := range evs {
							commits[e.ID] = at
						}
						mu.Unlock()
						poller.watch(evs, at)
					}
				})
			}
			wg.Wait()
			return float64(len(evs)) / time.Since(started).Seconds()
		}
		t1 := time.Now()
		flatOutRate := produce(flatOut, 0, false)
		bd.waitPending(10 * time.Minute)
		systemRate := float64(len(flatOut)) / time.Since(t1).Seconds()
		maxRate := min(drainRate, systemRate)
		rate := maxRate * share

		// The warm-up is not measured: right after the backlog and the
		// flat-out phase the engine and PostgreSQL are still busy with
		// them (merges, vacuum).
		produce(warm, rate, false)
		batchMu.Lock()
		measuring = true
		batchMu.Unlock()
		before, cpu0, cons0, work0 := r.Stats(), testenv.ReadCPU(), cons.Stats(), bd.indexWork(bd.alias)
		produced := produce(steady, rate, true)
		bd.waitPending(5 * time.Minute)
		after, cpu, cons1, work := r.Stats(), testenv.ReadCPU().Sub(cpu0), cons.Stats(), bd.indexWork(bd.alias).since(work0)
		batchMu.Lock()
		measuring = false
		var claims, delivers, acks []time.Duration
		for _, bs := range steadyBatches {
			claims, delivers, acks = append(claims, bs.Claim), append(delivers, bs.Deliver), append(acks, bs.Ack)
		}
		batchMu.Unlock()
		searchable := poller.wait(time.Minute)
		b.StopTimer()

		ids := make([]int64, 0, len(commits))
		for id := range commits {
			ids = append(ids, id)
		}
		rows, err := bd.db.Pool.Query(bd.ctx, `SELECT id, dispatched_at FROM aa_outbox_event WHERE id = ANY($1)`, ids)
		if err != nil {
			b.Fatal(err)
		}
		acked := make([]time.Duration, 0, len(ids))
		for rows.Next() {
			var id int64
			var at time.Time
			if err := rows.Scan(&id, &at); err != nil {
				b.Fatal(err)
			}
			acked = append(acked, at.Sub(commits[id]))
		}
		if err := rows.Err(); err != nil {
			b.Fatal(err)
		}
		if len(acked) != len(ids) {
			b.Fatalf("%d of %d events found dispatched", len(acked), len(ids))
		}
		ms := func(ds []time.Duration, q float64) float64 {
			return float64(quantile(ds, q)) / float64(time.Millisecond)
		}
		b.ReportMetric(drainRate, "max_events/s")
		b.ReportMetric(systemRate, "system_max_events/s")
		b.ReportMetric(produced, "steady_events/s")
		b.ReportMetric(ms(acked, 0.5), "acked_p50_ms")
		b.ReportMetric(ms(acked, 0.99), "acked_p99_ms")
		b.ReportMetric(ms(searchable, 0.5), "searchable_p50_ms")
		b.ReportMetric(ms(searchable, 0.99), "searchable_p99_ms")
		b.Logf("maximum %.0f events/s: the relay drained its backlog at %.0f/s; producers flat out wrote %.0f/s, all acknowledged at %.0f/s", maxRate, drainRate, flatOutRate, systemRate)
		b.Logf("steady phase %d events at %.0f/s (asked %.0f); commit → acknowledged p50 %.1f ms, p99 %.1f ms, max %.1f ms; commit → searchable (%d samples, %d dropped: deleted before found) p50 %.0f ms, p99 %.0f ms, max %.0f ms",
			len(steady), produced, rate, ms(acked, 0.5), ms(acked, 0.99), ms(acked, 1),
			len(searchable), poller.dropped, ms(searchable, 0.5), ms(searchable, 0.99), ms(searchable, 1))
		if n := after.Batches - before.Batches; n > 0 {
			per := func(a, b time.Duration) float64 { return float64(a-b) / float64(n) / float64(time.Millisecond) }
			b.Logf("steady phase: %d batches, %.0f events each; per batch claim %.1f ms, deliver %.1f ms, ack %.1f ms; %d writes, %d _mget, %d states from the cache; %s (this process: the relay, the producers and the poller)",
				n, float64(after.Claimed-before.Claimed)/float64(n), per(after.ClaimTime, before.ClaimTime),
				per(after.DeliverTime, before.DeliverTime), per(after.AckTime, before.AckTime),
				cons1.Writes-cons0.Writes, cons1.MGets-cons0.MGets, cons1.StateHits-cons0.StateHits, cpu)
			b.Logf("steady phase, per batch p50 / p99 / max: claim %.1f / %.1f / %.1f ms, deliver %.1f / %.1f / %.1f ms, ack %.1f / %.1f / %.1f ms",
				ms(claims, 0.5), ms(claims, 0.99), ms(claims, 1), ms(delivers, 0.5), ms(delivers, 0.99), ms(delivers, 1),
				ms(acks, 0.5), ms(acks, 0.99), ms(acks, 1))
			b.Logf("steady phase: %s", work)
		}
	}
}

// produceAt writes evs in one transaction and returns them with their ids,
// and when its COMMIT returned.
func (b *bundle) produceAt(evs []outbox.Event) ([]*outbox.Event, time.Time) {
	var ids []int64
	err := pgx.BeginFunc(b.ctx, b.db.Pool, func(tx pgx.Tx) error {
		var err error
		ids, err = b.w.Write(b.ctx, tx, evs...)
		return err
	})
	at := time.Now()
	if err != nil {
		b.t.Error(err)
		return nil, at
	}
	out := make([]*outbox.Event, len(evs))
	for i := range evs {
		e := evs[i]
		e.ID = ids[i]
		e.SchemaVersion = max(e.SchemaVersion, 1) // the column's default
		out[i] = &e
	}
	return out, at
}

// quantile is the q-quantile of ds (nearest rank; 0 when empty).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// searchablePoller finds when documents become searchable.
type searchablePoller struct {
	bd *bundle

	mu      sync.Mutex
	pending map[string][]watched // by document id, oldest first
	found   []time.Duration
	dropped int // watched versions of documents deleted before they were found
	stop    chan struct{}
	done    chan struct{}
}

type watched struct {
	version int64
	commit  time.Time
}

func newSearchablePoller(bd *bundle) *searchablePoller {
	return &searchablePoller{bd: bd, pending: map[string][]watched{}, stop: make(chan struct{}), done: make(chan struct{})}
}

// watch takes the events of one transaction, committed at commit: it waits
// for the document of the last one that writes a live document, at that
// event's version. An event that deletes its document drops the versions of
// the document still watched (the alias no longer shows it).
func (p *searchablePoller) watch(evs []*outbox.Event, commit time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var last *projections.Result
	for _, e := range evs {
		r, err := p.bd.set.Project(e, nil, nil)
		if err != nil || r == nil {
			p.bd.t.Errorf("project event %d: %v", e.ID, err)
			return
		}
		if r.Op == projections.OpDelete {
			p.dropped += len(p.pending[r.ID])
			delete(p.pending, r.ID)
			if last != nil && last.ID == r.ID {
				last = nil
			}
			continue
		}
		last = r
	}
	if last != nil {
		p.pending[last.ID] = append(p.pending[last.ID], watched{version: last.Version, commit: commit})
	}
}

// run searches for the pending documents after every refresh of the alias:
// documents become searchable only then. A refresh is seen as a grown
// refresh count of a shard copy (external refreshes, those that searches
// see); the poller also searches every 250 ms in case none is seen.
func (p *searchablePoller) run() {
	defer close(p.done)
	adm, ok := p.bd.eng.(indexer.Admin)
	if !ok {
		p.bd.t.Errorf("the engine does not implement indexer.Admin: refresh counts cannot be read")
		return
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	var counts map[string]int64
	var searched time.Time
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		p.mu.Lock()
		ids := make([]string, 0, len(p.pending))
		for id := range p.pending {
			ids = append(ids, id)
		}
		p.mu.Unlock()
		if len(ids) == 0 {
			continue
		}
		now, err := adm.Refreshes(p.bd.ctx, p.bd.alias)
		if err == nil && maps.Equal(now, counts) && time.Since(searched) < 250*time.Millisecond {
			continue // no refresh since the last search: nothing new is searchable
		}
		if err == nil {
			counts = now
		}
		searched = time.Now()
		body, _ := json.Marshal(map[string]any{"query": map[string]any{"ids": map[string]any{"values": ids}},
			"version": true, "size": len(ids), "_source": false})
		res, err := p.bd.eng.Search(p.bd.ctx, p.bd.alias, body)
		if err != nil {
			continue // counted as not yet searchable
		}
		at := time.Now()
		p.mu.Lock()
		for _, h := range res.Hits {
			// Every watched version up to the one found is searchable.
			ws := p.pending[h.ID]
			n := 0
			for n < len(ws) && ws[n].version <= h.Version {
				p.found = append(p.found, at.Sub(ws[n].commit))
				n++
			}
			if ws = ws[n:]; len(ws) == 0 {
				delete(p.pending, h.ID)
			} else {
				p.pending[h.ID] = ws
			}
		}
		p.mu.Unlock()
	}
}

// wait waits until every watched document was found (at most timeout),
// stops the poller and returns the latencies.
func (p *searchablePoller) wait(timeout time.Duration) []time.Duration {
	deadline := time.Now().Add(timeout)
	for {
		p.mu.Lock()
		n := len(p.pending)
		p.mu.Unlock()
		if n == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.pending) > 0 {
		p.bd.t.Fatalf("%d documents not searchable at their version within %s", len(p.pending), timeout)
	}
	return p.found
}
