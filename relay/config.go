package relay

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/google/uuid"

	"github.com/searchsync/searchsync/sink"
)

// Config configures a Relay. The zero value of every field means its default.
type Config struct {
	// Schema holds the outbox and the relay's tables. Default "mdm".
	Schema string
	// Partitions spreads aggregates over this many partitions, 1 to 4096.
	// Default 32.
	// Every relay of one database must use the same number.
	Partitions int
	// BatchSize is the most events the first claim takes. Default 500.
	BatchSize int
	// MaxBatchSize is the most events claimed at once while a backlog
	// lasts: after a claim that came back full, the next one takes twice
	// as many, up to MaxBatchSize; a claim that finds less than half of its
	// size goes back to BatchSize. Larger batches fold more updates of one
	// aggregate into one write and cost fewer round trips per event. Equal
	// to BatchSize: every claim takes BatchSize. Default 8 × BatchSize.
	MaxBatchSize int
	// InFlight is the most batches delivered at once: while claims come
	// back full, and without a backlog, where the relay claims beside the
	// batches in flight as events come (see the package doc); batches in
	// flight never share an aggregate, and consumers must take concurrent
	// Deliver calls. With a backlog, a claim made once the deliveries ended
	// (past the aggregates they delivered, see the package doc) waits until
	// fewer than InFlight batches are unacked. 1 delivers one batch at a
	// time, and with a backlog claims after every ack (without one, its
	// claims still run beside the acks). Default 2.
	InFlight int
	// PollInterval is the fallback wake-up when no NOTIFY arrives. Default 1s.
	PollInterval time.Duration
	// LeaseTTL is how long a lease lives without renewal; leases are renewed
	// every LeaseTTL/3. At least 1s. Default 15s.
	LeaseTTL time.Duration
	// MaxAttempts is the number of failed deliveries after which an event
	// becomes failed. Default 10.
	MaxAttempts int
	// Backoff moves available_at after a retry. Defaults: initial 1s, max 10m,
	// multiplier 2, jitter 0.2.
	Backoff Backoff
	// Pause is how a paused consumer is probed (see docs/consumers.md).
	// Defaults: first probe after 1s, doubling, at most 3s apart.
	Pause Pause
	// Watermark guards the id order of each aggregate against producers
	// that insert without taking the aggregate's advisory lock (see
	// docs/ordering.md).
	Watermark Watermark
	// ShutdownGrace bounds how long a stop waits for the batch in flight
	// before it abandons it (its events are delivered again later). Default 10s.
	ShutdownGrace time.Duration
	// InstanceID names this relay in aa_relay_instance and aa_relay_lease.
	// Default "<hostname>-<pid>-<random>".
	InstanceID string
	// Routes send events to consumers. An event no route matches is skipped.
	Routes []Route
	// Logger receives the relay's logs. Default slog.Default().
	Logger *slog.Logger
	// OnBatch, when set, is called after every batch with its figures, in
	// the order the batches were claimed.
	OnBatch func(BatchStats)
}

// Route sends the events Match accepts to Consumer.
type Route struct {
	Consumer sink.Consumer
	// Match reports whether the consumer wants an event of this type and
	// aggregate type. Nil matches everything.
	Match func(eventType, aggregateType string) bool
}

// Backoff moves available_at after a failed delivery: exponential with jitter
// and a cap. The zero value of every field means its default.
type Backoff struct {
	// Initial is the first delay. Default 1s.
	Initial time.Duration
	// Max caps each delay; not smaller than Initial. Default 10m.
	Max time.Duration
	// Multiplier grows the delay per attempt; at least 1. Default 2.
	Multiplier float64
	// Jitter is the randomization factor in [0,1). Default 0.2.
	Jitter float64
}

// Watermark is the visibility watermark (watermark.go, docs/ordering.md):
// an event with an aggregate is claimed only once no transaction can still
// commit a lower id. Out-of-order deliveries are detected and reported
// either way. The zero value of every field means its default.
type Watermark struct {
	// Mode is "on" or "off". Default "on".
	Mode string
	// Interval is how often the relay samples the database's snapshot
	// while an id waits for release; it bounds the latency the watermark
	// adds beyond the producers' own transactions: an event waits for about
	// one and a half intervals (docs/ordering.md). Default 5ms.
	Interval time.Duration
	// MaxWait bounds how long an id waits for a transaction that holds
	// outbox rows uncommitted; then the relay stops waiting for it (a WARN
	// names it) and reports its events if they come out of order. Default 30s.
	MaxWait time.Duration
}

// On reports whether the watermark is on (after WithDefaults).
func (w Watermark) On() bool { return w.Mode == "on" }

// Pause is the probing of a paused consumer: the first probe after
// ProbeInitial, each next one twice as late, never later than ProbeMax. The
// zero value of every field means its default.
type Pause struct {
	// ProbeInitial is the delay before the first probe. Default 1s.
	ProbeInitial time.Duration
	// ProbeMax caps the delay between probes, so a consumer resumes at most
	// this long after it came back; not smaller than ProbeInitial. Default 3s.
	ProbeMax time.Duration
}

// WithDefaults returns c with every zero tunable replaced by its default (the
// one its field's comment gives). InstanceID and Logger are left as they are:
// New fills them. New calls it; internal/config calls it to know and show the
// effective values of a file.
func (c Config) WithDefaults() Config {
	c.Schema = cmp.Or(c.Schema, "mdm")
	c.Partitions = cmp.Or(c.Partitions, 32)
	c.BatchSize = cmp.Or(c.BatchSize, 500)
	c.MaxBatchSize = cmp.Or(c.MaxBatchSize, 8*c.BatchSize)
	c.InFlight = cmp.Or(c.InFlight, 2)
	c.PollInterval = cmp.Or(c.PollInterval, time.Second)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, 15*time.Second)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, 10)
	c.Backoff.Initial = cmp.Or(c.Backoff.Initial, time.Second)
	c.Backoff.Max = cmp.Or(c.Backoff.Max, 10*time.Minute)
	c.Backoff.Multiplier = cmp.Or(c.Backoff.Multiplier, 2)
	c.Backoff.Jitter = cmp.Or(c.Backoff.Jitter, 0.2)
	c.Pause.ProbeInitial = cmp.Or(c.Pause.ProbeInitial, time.Second)
	c.Pause.ProbeMax = cmp.Or(c.Pause.ProbeMax, 3*time.Second)
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, 10*time.Second)
	c.Watermark.Mode = cmp.Or(c.Watermark.Mode, "on")
	c.Watermark.Interval = cmp.Or(c.Watermark.Interval, 5*time.Millisecond)
	c.Watermark.MaxWait = cmp.Or(c.Watermark.MaxWait, 30*time.Second)
	return c
}

func (c *Config) setDefaults() {
	*c = c.WithDefaults()
	if c.InstanceID == "" {
		host, _ := os.Hostname()
		c.InstanceID = fmt.Sprintf("%s-%d-%s", cmp.Or(host, "relay"), os.Getpid(), uuid.NewString()[:8])
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// ConfigError is one invalid value of a Config. Key is the setting's name
// as the configuration file spells it under relay: ("backoff.max"), so that
// internal/config can point at the key's line.
type ConfigError struct {
	Key    string
	Reason string
}

func (e *ConfigError) Error() string { return "relay: " + e.Key + ": " + e.Reason }

// Validate checks c as New would use it (after WithDefaults) and reports
// every invalid value as a *ConfigError, joined.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, reason string) { errs = append(errs, &ConfigError{Key: key, Reason: reason}) }
	positive := func(key string, n int) {
		if n <= 0 {
			bad(key, "must be positive")
		}
	}
	positiveDur := func(key string, d time.Duration) {
		if d <= 0 {
			bad(key, "must be a positive duration such as 500ms or 10s")
		}
	}
	positive("partitions", c.Partitions)
	if c.Partitions > 4096 {
		bad("partitions", "must be at most 4096")
	}
	positive("batch_size", c.BatchSize)
	if c.MaxBatchSize < c.BatchSize {
		bad("max_batch_size", "must not be smaller than relay.batch_size")
	}
	positive("in_flight", c.InFlight)
	positiveDur("poll_interval", c.PollInterval)
	if c.LeaseTTL < time.Second {
		bad("lease_ttl", "must be at least 1s")
	}
	positive("max_attempts", c.MaxAttempts)
	positiveDur("backoff.initial", c.Backoff.Initial)
	if c.Backoff.Max < c.Backoff.Initial {
		bad("backoff.max", "must not be smaller than relay.backoff.initial")
	}
	if c.Backoff.Multiplier < 1 {
		bad("backoff.multiplier", "must be at least 1")
	}
	if c.Backoff.Jitter < 0 || c.Backoff.Jitter >= 1 {
		bad("backoff.jitter", "must be in [0, 1)")
	}
	positiveDur("pause.probe_initial", c.Pause.ProbeInitial)
	if c.Pause.ProbeMax < c.Pause.ProbeInitial {
		bad("pause.probe_max", "must not be smaller than relay.pause.probe_initial")
	}
	positiveDur("shutdown_grace", c.ShutdownGrace)
	if c.Watermark.Mode != "on" && c.Watermark.Mode != "off" {
		bad("watermark.mode", fmt.Sprintf("%q is not one of on, off", c.Watermark.Mode))
	}
	positiveDur("watermark.interval", c.Watermark.Interval)
	if c.Watermark.MaxWait < time.Second {
		bad("watermark.max_wait", "must be at least 1s")
	}
	for i, r := range c.Routes {
		if r.Consumer == nil {
			bad(fmt.Sprintf("routes[%d]", i), "no consumer")
		}
	}
	return errors.Join(errs...)
}

// backoffDelay is the delay before the next try of an event that has now
// failed attempts times (attempts >= 1): exponential from Initial by
// Multiplier, capped at Max, randomised by Jitter (cenkalti/backoff).
func backoffDelay(b Backoff, attempts int) time.Duration {
	eb := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(b.Initial),
		backoff.WithMaxInterval(b.Max),
		backoff.WithMultiplier(b.Multiplier),
		backoff.WithRandomizationFactor(b.Jitter),
		backoff.WithMaxElapsedTime(0),
	)
	d := eb.NextBackOff()
	for i := 1; i < attempts; i++ {
		d = eb.NextBackOff()
	}
	return min(d, b.Max)
}
