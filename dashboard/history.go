package dashboard

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/searchsync/searchsync/internal/background"
	"github.com/searchsync/searchsync/internal/metrics"
	"github.com/searchsync/searchsync/lag"
)

// DB is what the history needs of a pool or a connection.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Sample is one row of the console's history (aa_console_sample): the lag
// figures of the whole outbox at one time, as the lag.Sampler of the relay
// that wrote it read them.
type Sample struct {
	At time.Time `json:"at"`
	// Instance is the relay that wrote the sample.
	Instance string `json:"instance"`
	// Lag is the deliverable lag (the headline); Rate the events handled
	// (dispatched or skipped) per second by all relays over the whole
	// seconds [RateFrom, RateUntil), the outbox's own count of them (the
	// window starts where the previous sample's ended); Pending, Failed and
	// Blocked the outbox's backlog, failed events and blocked aggregates.
	Lag       float64   `json:"lag"`
	Rate      float64   `json:"rate"`
	RateFrom  time.Time `json:"rate_from"`
	RateUntil time.Time `json:"rate_until"`
	Pending   int64     `json:"pending"`
	Failed    int64     `json:"failed"`
	Blocked   int64     `json:"blocked"`
	// Consumers has one entry per consumer.
	Consumers map[string]ConsumerSample `json:"consumers"`
}

// ConsumerSample is one consumer in a Sample.
type ConsumerSample struct {
	// Indexes are the indexes a search consumer writes (their series are
	// the consumer's: one consumer writes them all in one bulk).
	Indexes []string `json:"indexes,omitempty"`
	// Lag is the consumer's deliverable lag; Blocked the aggregates blocked
	// for it by a failed or backing-off head and BlockedEvents the events
	// they hold; Paused is set while it is paused.
	Lag           float64 `json:"lag"`
	Blocked       int64   `json:"blocked"`
	BlockedEvents int64   `json:"blocked_events"`
	Paused        bool    `json:"paused,omitempty"`
	// Pending is what the consumer still owes (its backlog, paused or
	// not); Rate the events it delivered per second over the sample's
	// rate window, all relays.
	Pending int64   `json:"pending"`
	Rate    float64 `json:"rate"`
	// Latency is commit → delivered of what the writing relay delivered
	// since its previous sample (absent when it delivered nothing).
	Latency *metrics.Quantiles `json:"latency,omitempty"`
	// Searchable is commit → searchable per index of a search consumer: of
	// the writes the writing relay saw searchable since its previous sample
	// (absent when none).
	Searchable map[string]metrics.Quantiles `json:"searchable,omitempty"`
}

// HistoryConfig configures a History.
type HistoryConfig struct {
	// Schema holds aa_console_sample and aa_console_lease.
	Schema string
	// Instance names the relay in the lease and the samples.
	Instance string
	// Interval between samples. Default 10s.
	Interval time.Duration
	// Retention is how long samples are kept. Default 24h.
	Retention time.Duration
	// Latency returns the commit → delivered percentiles per consumer since
	// its previous call (metrics.LatencyWindow.Since); nil: none.
	Latency func() map[string]metrics.Quantiles
	// Searchable returns the commit → searchable percentiles per consumer
	// and index since its previous call (metrics.SearchableWindow.Since);
	// nil: none.
	Searchable func() map[string]map[string]metrics.Quantiles
}

// History writes the console's samples to PostgreSQL and reads them back.
// Every relay runs one; the one holding the console lease writes, so the
// history is one series whichever relay serves the page, and it survives
// restarts.
type History struct {
	db      DB
	sampler *lag.Sampler
	cfg     HistoryConfig
	logger  *slog.Logger
	q       historyQueries

	lastAt   time.Time
	lastTrim time.Time
	// counted is the snapshot whose delivered counts the last written
	// sample's rate window ended with.
	counted *lag.Snapshot
}

// NewHistory returns a History writing the snapshots of sampler.
func NewHistory(db DB, sampler *lag.Sampler, cfg HistoryConfig, logger *slog.Logger) *History {
	cfg.Interval = cmp.Or(cfg.Interval, 10*time.Second)
	cfg.Retention = cmp.Or(cfg.Retention, 24*time.Hour)
	return &History{db: db, sampler: sampler, cfg: cfg, logger: cmp.Or(logger, slog.Default()), q: newHistoryQueries(cfg.Schema)}
}

// Interval is the time between two samples.
func (h *History) Interval() time.Duration { return h.cfg.Interval }

// Name is the history writer's name among the background services.
func (h *History) Name() string { return "console history" }

// Run writes a sample every interval until ctx ends, then gives the lease
// up so that another relay takes over at once, and returns nil. A failed
// write is logged and tried again at the next interval.
func (h *History) Run(ctx context.Context) error {
	background.Loop{
		Interval: h.cfg.Interval,
		Turn: func(ctx context.Context) error {
			_, err := h.Write(ctx)
			return err
		},
		Logger: h.logger,
		Failed: "console history: write a sample",
	}.Run(ctx)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := h.Release(rctx); err != nil {
		h.logger.Warn("console history: release the lease", "err", err)
	}
	return nil
}

// historyMaxTrim bounds one trimming DELETE.
const historyMaxTrim = 1000

type historyQueries struct{ write, release, trim, trimThroughput, read, readThinned, readSince string }

func newHistoryQueries(schema string) historyQueries {
	r := strings.NewReplacer("{s}", pgx.Identifier{schema, "aa_console_sample"}.Sanitize(),
		"{l}", pgx.Identifier{schema, "aa_console_lease"}.Sanitize(), "{t}", pgx.Identifier{schema, "aa_consumer_throughput"}.Sanitize())
	return historyQueries{
		// One statement takes or renews the lease and writes the sample
		// only when it holds it: $1 instance, $2 lease seconds, $3 at, $4
		// the sample.
		write: r.Replace(`
			WITH lease AS (
				INSERT INTO {l} AS l (id, owner, expires_at) VALUES (1, $1, now() + make_interval(secs => $2))
				ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
				WHERE l.owner = excluded.owner OR l.expires_at < now()
				RETURNING owner)
			INSERT INTO {s} (at, instance, sample) SELECT $3, owner, $4 FROM lease
			ON CONFLICT (at) DO NOTHING`),
		release:        r.Replace(`DELETE FROM {l} WHERE owner = $1`),
		trimThroughput: r.Replace(`DELETE FROM {t} WHERE second < now() - make_interval(secs => $1)`),
		// Oldest first through the primary key, at most historyMaxTrim rows.
		trim: r.Replace(`
			DELETE FROM {s} WHERE at IN (
				SELECT at FROM {s} WHERE at < now() - make_interval(secs => $1) ORDER BY at LIMIT ` + fmt.Sprint(historyMaxTrim) + `)`),
		// One sample per step over the range (the newest of each step):
		// $1 range seconds, $2 step seconds.
		read: r.Replace(`SELECT at, instance, sample FROM {s} WHERE at > now() - make_interval(secs => $1) ORDER BY at`),
		readThinned: r.Replace(`
			SELECT at, instance, sample FROM (
				SELECT DISTINCT ON (date_bin(make_interval(secs => $2), at, '2000-01-01'::timestamptz)) at, instance, sample
				FROM {s} WHERE at > now() - make_interval(secs => $1)
				ORDER BY date_bin(make_interval(secs => $2), at, '2000-01-01'::timestamptz), at DESC) x
			ORDER BY at`),
		readSince: r.Replace(`SELECT at, instance, sample FROM {s} WHERE at > $1 ORDER BY at LIMIT 1000`),
	}
}

// Write records the sampler's latest snapshot when it is newer than the last
// one written and this relay holds (or takes) the console lease. It reports
// whether a row was written. At most once a minute (or ten intervals) the
// writer also deletes expired rows (Trim).
func (h *History) Write(ctx context.Context) (bool, error) {
	snap := h.sampler.Last()
	if snap == nil || !snap.At.After(h.lastAt) {
		return false, nil
	}
	// The percentiles of what was delivered since the previous sample.
	var lat map[string]metrics.Quantiles
	if h.cfg.Latency != nil {
		lat = h.cfg.Latency()
	}
	var srch map[string]map[string]metrics.Quantiles
	if h.cfg.Searchable != nil {
		srch = h.cfg.Searchable()
	}
	s := sampleOf(snap, lat)
	h.rates(&s, snap)
	for name, cs := range s.Consumers {
		if q := srch[name]; len(q) > 0 {
			cs.Searchable = q
			s.Consumers[name] = cs
		}
	}
	body, err := json.Marshal(s)
	if err != nil {
		return false, err
	}
	lease := h.leaseTTL()
	tag, err := h.db.Exec(ctx, h.q.write, h.cfg.Instance, lease.Seconds(), snap.At, body)
	if err != nil {
		return false, fmt.Errorf("write to aa_console_sample: %w", err)
	}
	h.lastAt = snap.At
	if tag.RowsAffected() == 0 {
		h.counted = nil
		return false, nil
	}
	h.counted = snap
	if time.Since(h.lastTrim) > max(time.Minute, 10*h.cfg.Interval) {
		h.lastTrim = time.Now()
		if _, err := h.Trim(ctx); err != nil {
			return true, err
		}
	}
	return true, nil
}

// rates sets the sample's rates over the seconds since the previous sample
// this History wrote (the difference of the sampler's running counts), so
// that the samples' windows follow each other without a gap or an overlap;
// the first sample of a writer takes the snapshot's own window.
func (h *History) rates(s *Sample, snap *lag.Snapshot) {
	s.RateFrom, s.RateUntil = snap.RateFrom, snap.RateUntil
	p := h.counted
	if p == nil || !p.CountedUntil.Before(snap.CountedUntil) {
		return
	}
	diff := map[string]int64{}
	for k, n := range snap.Delivered {
		if diff[k] = n - p.Delivered[k]; diff[k] < 0 {
			return // the sampler started its counts again
		}
	}
	secs := snap.CountedUntil.Sub(p.CountedUntil).Seconds()
	s.RateFrom, s.RateUntil, s.Rate = p.CountedUntil, snap.CountedUntil, round3(float64(diff["*"])/secs)
	for name, cs := range s.Consumers {
		cs.Rate = round3(float64(diff[name]) / secs)
		s.Consumers[name] = cs
	}
}

// leaseTTL is how long the console lease lasts without a renewal: a writer
// renews it with every sample, and a sample waits for a new lag snapshot,
// which a slow read delays (lag.Sampler's duty cycle): 5 intervals, at least
// 30 s. A relay that stops gives it up (Release); one that dies holds it
// that long.
func (h *History) leaseTTL() time.Duration { return max(5*h.cfg.Interval, 30*time.Second) }

// Release gives the console lease up if this relay holds it.
func (h *History) Release(ctx context.Context) error {
	if _, err := h.db.Exec(ctx, h.q.release, h.cfg.Instance); err != nil {
		return fmt.Errorf("release aa_console_lease: %w", err)
	}
	return nil
}

// throughputKept is how long the relays' per-second delivery counts
// (aa_consumer_throughput) are kept: far longer than any sampler's window.
const throughputKept = 10 * time.Minute

// Trim deletes samples older than the retention, historyMaxTrim rows per
// statement, at most ten statements, and the per-second delivery counts
// older than throughputKept; it returns how many samples went.
func (h *History) Trim(ctx context.Context) (int64, error) {
	if _, err := h.db.Exec(ctx, h.q.trimThroughput, throughputKept.Seconds()); err != nil {
		return 0, fmt.Errorf("trim aa_consumer_throughput: %w", err)
	}
	var n int64
	for range 10 {
		tag, err := h.db.Exec(ctx, h.q.trim, h.cfg.Retention.Seconds())
		if err != nil {
			return n, fmt.Errorf("trim aa_console_sample: %w", err)
		}
		n += tag.RowsAffected()
		if tag.RowsAffected() < historyMaxTrim {
			break
		}
	}
	return n, nil
}

// maxPoints bounds the samples one read returns for a range.
const maxPoints = 720

// Read returns the samples of the last span, oldest first, at most
// maxPoints of them (one per step, step = max(interval, span/maxPoints)), and
// the step. With since set it returns the samples after since instead (for a
// page that already has the older ones), at most 1000.
func (h *History) Read(ctx context.Context, span time.Duration, since time.Time) ([]Sample, time.Duration, error) {
	step := max(h.cfg.Interval, span/maxPoints)
	var rows pgx.Rows
	var err error
	switch {
	case !since.IsZero():
		rows, err = h.db.Query(ctx, h.q.readSince, since)
	case step == h.cfg.Interval:
		rows, err = h.db.Query(ctx, h.q.read, span.Seconds())
	default:
		rows, err = h.db.Query(ctx, h.q.readThinned, span.Seconds(), step.Seconds())
	}
	if err != nil {
		return nil, step, fmt.Errorf("read aa_console_sample: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Sample, error) {
		var s Sample
		var at time.Time
		var instance string
		var body []byte
		if err := row.Scan(&at, &instance, &body); err != nil {
			return s, err
		}
		if err := json.Unmarshal(body, &s); err != nil {
			return s, err
		}
		s.At, s.Instance = at, instance
		return s, nil
	})
	if err != nil {
		return nil, step, fmt.Errorf("read aa_console_sample: %w", err)
	}
	return out, step, nil
}

func sampleOf(snap *lag.Snapshot, lat map[string]metrics.Quantiles) Sample {
	s := Sample{At: snap.At, Lag: round3(snap.DeliverableLag), Rate: round3(snap.DeliveredRate), Pending: snap.Pending,
		Failed: snap.Failed, Blocked: snap.BlockedCount, Consumers: map[string]ConsumerSample{}}
	for _, c := range snap.Consumers {
		cs := ConsumerSample{Indexes: c.Indexes, Lag: round3(c.DeliverableLag), Pending: c.Pending, Rate: round3(c.DeliveredRate),
			Blocked:       c.Blocked.Failed.Aggregates + c.Blocked.BackingOff.Aggregates,
			BlockedEvents: c.Blocked.Failed.Events + c.Blocked.BackingOff.Events, Paused: c.Paused != nil}
		if q, ok := lat[c.Name]; ok {
			cs.Latency = &q
		}
		s.Consumers[c.Name] = cs
	}
	return s
}

func round3(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }
